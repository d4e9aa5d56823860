"""Misconception: "more heads is always better". Two measurements:

1. a head-count sweep at a fixed model width (D = 32, heads 1 … 32, so the per-head size falls from
   32 to 1) on a real task the report can train in seconds: scikit-learn's 8×8 handwritten digits
   (1,797 images, shipped with scikit-learn, no download) classified by a one-block ViT-like model
   (2×2-pixel patches → 16 tokens) built on :class:`attnkit.MultiHeadAttention`; ≥ 3 seeds,
   test accuracy and training time;
2. pruning all-MiniLM-L6-v2's least important heads — importance by ablation
   (:func:`attnkit.inspect.head_importance`, Michel et al. 2019, https://arxiv.org/abs/1905.10650) on
   one set of sentences — and measuring, on other sentences, the cosine similarity of the pruned
   model's sentence embeddings to the unpruned ones (and, as a control, of pruning random heads).

Shape legend: B batch, T tokens (16 patches), D width, H heads, D/H per-head size.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch
from torch import nn

from ...page.figures import save_both
from ...page.html import details, figure, so_what, table
from ...page.i18n import tr
from ..lab.context import RunContext
from ..lab.registry import Experiment, register
from ..lab.results import Section
from ..lab.threads import threads
from .explain import SENTENCES

HELD_OUT = [
    "Two children built a sandcastle while the tide came in.",
    "The bakery on the corner sells bread until noon.",
    "Heavy traffic delayed the bus by almost an hour.",
    "The orchestra rehearsed the symphony for three weeks.",
    "A small leak in the roof ruined the library's old maps.",
    "The startup hired ten engineers after its first funding round.",
]


class TinyViT(nn.Module):
    """8×8 image (B, 1, 8, 8) → 16 patches of 2×2 → one pre-norm attention block → class logits (B, 10)."""

    def __init__(self, dim: int = 32, heads: int = 4, classes: int = 10):
        super().__init__()
        from ... import MultiHeadAttention

        self.embed = nn.Linear(4, dim)
        self.pos = nn.Parameter(torch.zeros(1, 16, dim))
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = MultiHeadAttention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B = x.shape[0]
        p = x.reshape(B, 4, 2, 4, 2).permute(0, 1, 3, 2, 4).reshape(B, 16, 4)  # (B, T=16, 4 pixels)
        h = self.embed(p) + self.pos  # (B, T, D)
        a, _ = self.attn(self.norm1(h))
        h = h + a
        h = h + self.mlp(self.norm2(h))
        return self.head(h.mean(1))  # (B, 10)


def _digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0  # (N, 1, 8, 8) in [0, 1]
    y = torch.tensor(d.target)
    g = torch.Generator().manual_seed(0)
    idx = torch.randperm(len(y), generator=g)  # one fixed split for every run
    n_train = 1200
    return x[idx[:n_train]], y[idx[:n_train]], x[idx[n_train:]], y[idx[n_train:]]


def _train_one(heads: int, seed: int, cfg: dict, data) -> dict:
    xtr, ytr, xte, yte = data
    torch.manual_seed(seed)
    model = TinyViT(cfg["dim"], heads)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"])
    n = len(ytr) if cfg.get("train_limit") is None else min(len(ytr), cfg["train_limit"])
    g = torch.Generator().manual_seed(seed)
    t0 = time.perf_counter()
    for _ in range(cfg["epochs"]):
        perm = torch.randperm(n, generator=g)
        for i in range(0, n, cfg["batch_size"]):
            j = perm[i:i + cfg["batch_size"]]
            loss = nn.functional.cross_entropy(model(xtr[j]), ytr[j])
            opt.zero_grad()
            loss.backward()
            opt.step()
    train_s = time.perf_counter() - t0
    model.eval()
    with torch.no_grad():
        acc = float((model(xte).argmax(-1) == yte).float().mean())
    return {"acc": acc, "train_s": train_s}


def _prune(cfg: dict, log) -> dict:
    from ...inspect import head_importance
    from ...models.bert import mean_pool
    from ...models.bert_loader import load_minilm

    model, tok = load_minilm()
    model.eval()
    N, H = model.num_layers, model.num_heads

    def embed(texts, head_mask=None):
        b = tok(texts)
        h = model(**b.as_kwargs(), head_mask=head_mask).last_hidden_state
        return torch.nn.functional.normalize(mean_pool(h, b.attention_mask), dim=-1)

    fit_texts, test_texts = SENTENCES[: cfg["prune_sentences"]], HELD_OUT[: cfg["prune_sentences"]]
    importance = head_importance(lambda m: embed(fit_texts, m), N, H)  # (N, H): 1 − cos when one head is removed
    order = importance.flatten().argsort()  # least important first
    g = torch.Generator().manual_seed(0)
    random_order = torch.randperm(N * H, generator=g)
    rows = []
    with torch.no_grad():
        full = embed(test_texts)
        for k in cfg["prune_counts"]:
            out = {"pruned": k}
            for name, ordering in (("least_important", order), ("random", random_order)):
                mask = torch.ones(N * H)
                mask[ordering[:k]] = 0.0
                cos = (embed(test_texts, mask.view(N, H)) * full).sum(-1)
                out[name] = {"mean_cos": float(cos.mean()), "min_cos": float(cos.min())}
            rows.append(out)
            log(f"pruned {k}/{N * H} heads: cos {out['least_important']['mean_cos']:.4f} (random {out['random']['mean_cos']:.4f})")
    return {"layers": N, "heads": H, "importance": importance.tolist(), "rows": rows}


@register
class MisconceptionHeads(Experiment):
    name = "misconceptions_heads"
    help = "misconception 'more heads is better': head sweep at fixed width on digits, and pruning MiniLM heads"
    quick = {"dim": 32, "head_counts": [1, 2, 4, 8, 16, 32], "seeds": 3, "epochs": 15, "batch_size": 64, "lr": 3e-3,
             "train_limit": None, "prune_sentences": 6, "prune_counts": [0, 12, 24, 36, 48, 60], "threads": 1}
    full = {**quick, "seeds": 5, "epochs": 30}
    tiny = {"head_counts": [1, 4], "seeds": 1, "epochs": 1, "prune_sentences": 2, "prune_counts": [0, 24]}
    title = ("Misconception: more heads is always better", "误解：头越多越好")
    question = ("At a fixed width, do more heads help, and does a trained model need all of its heads?",
                "固定宽度下，更多的头有帮助吗？训练好的模型需要它所有的头吗？")
    how_to_read = (
        "Left: test accuracy versus head count at a fixed width (error bars over seeds). Right: how close the pruned model's "
        "sentence embeddings stay to the full model's (1 = unchanged) as heads are removed.",
        "左图：固定宽度下测试准确率随头数的变化（误差线为多个种子）。右图：逐步剪掉头后，句向量与完整模型的接近程度（1 = 不变）。")
    report_order = 140
    lesson = "03_multihead_by_hand"  # the course lesson the report links under "Go deeper"
    est_s = {"quick": 60, "tiny": 8}
    run_in_report = True

    def run(self, ctx: RunContext) -> dict:
        with threads(ctx.config.get("threads")):
            return self._run(ctx)

    def _run(self, ctx: RunContext) -> dict:
        cfg = ctx.config
        data = _digits()
        sweep = []
        for h in cfg["head_counts"]:
            runs = [_train_one(h, s, cfg, data) for s in ctx.seeds]
            accs, times = [r["acc"] for r in runs], [r["train_s"] for r in runs]
            sweep.append({"heads": h, "head_dim": cfg["dim"] // h, "acc_mean": statistics.fmean(accs),
                          "acc_std": statistics.stdev(accs) if len(accs) > 1 else 0.0, "acc": accs,
                          "train_s_mean": statistics.fmean(times)})
            ctx.log(f"{h} heads: accuracy {sweep[-1]['acc_mean']:.4f} ± {sweep[-1]['acc_std']:.4f}, {sweep[-1]['train_s_mean']:.1f} s")
        prune = _prune(cfg, ctx.log)
        ctx.save_figure(_figure(sweep, prune, cfg["dim"]), "heads.png")
        return {"sweep": sweep, "prune": prune, "dim": cfg["dim"], "n_test": len(data[3]), "n_seeds": len(ctx.seeds), "figure": "heads.png"}

    def report(self, results, out_dir, lang: str = "en", full_results=None) -> Section:

        sw, pr = results["sweep"], results["prune"]
        best = max(sw, key=lambda r: r["acc_mean"])
        most = max(sw, key=lambda r: r["heads"])
        total = pr["layers"] * pr["heads"]
        half = min(pr["rows"], key=lambda r: abs(r["pruned"] - total // 2))
        text = tr(lang,
                  f"At a fixed width of {results['dim']}, on sklearn's digits ({results['n_test']} test images, {results['n_seeds']} seeds), "
                  f"the best mean test accuracy was {100 * best['acc_mean']:.1f} % with {best['heads']} head(s) (size {best['head_dim']} each); "
                  f"{most['heads']} heads of size {most['head_dim']} reached {100 * most['acc_mean']:.1f} % ± {100 * most['acc_std']:.1f}. "
                  + _shape_sentence(sw, best, most, "en") +
                  f"Pruning: removing the {half['pruned']} least important of MiniLM's {total} heads (importance by ablation on other "
                  f"sentences) kept the held-out sentence embeddings at cosine {half['least_important']['mean_cos']:.3f} to the full model's; "
                  f"removing {half['pruned']} random heads gave {half['random']['mean_cos']:.3f}.",
                  f"在固定宽度 {results['dim']} 下，用 sklearn 手写数字（{results['n_test']} 张测试图，{results['n_seeds']} 个种子），"
                  f"平均测试准确率最高为 {100 * best['acc_mean']:.1f}%，此时有 {best['heads']} 个头（每个大小 {best['head_dim']}）；"
                  f"{most['heads']} 个大小为 {most['head_dim']} 的头达到 {100 * most['acc_mean']:.1f}% ± {100 * most['acc_std']:.1f}。"
                  + _shape_sentence(sw, best, most, "zh") +
                  f"剪枝：去掉 MiniLM {total} 个头中最不重要的 {half['pruned']} 个（重要性由另一组句子上的消融得到）后，"
                  f"留出句子的句向量与完整模型的余弦相似度为 {half['least_important']['mean_cos']:.3f}；随机去掉 {half['pruned']} 个头则为 "
                  f"{half['random']['mean_cos']:.3f}。")
        png = save_both(Path(out_dir) / "figures" / self.name / results["figure"], lambda lg: _figure(sw, pr, results["dim"], lg))[0]
        html = f"<p>{text}</p>" + figure(png, tr(lang, "head sweep and pruning", "头数扫描与剪枝"), lang)
        html += so_what(lang, tr(lang, "At a fixed width, more heads means smaller heads: each one scores pairs in fewer dimensions. "
                                       "The best count is found by measuring, and a trained model often keeps working with many of its "
                                       "heads removed.",
                                 "宽度固定时，头越多，每个头就越小：每个头只能在更少的维度上给配对打分。最佳头数要靠实测，"
                                 "而训练好的模型去掉许多头之后往往仍能正常工作。"))
        rows = table([tr(lang, "heads", "头数"), tr(lang, "size per head", "每头维度"), tr(lang, "test accuracy, mean ± std", "测试准确率（均值 ± 标准差）"),
                       tr(lang, "training time, s (mean)", "训练时间（秒，均值）")],
                      [[r["heads"], r["head_dim"], f"{100 * r['acc_mean']:.1f} ± {100 * r['acc_std']:.1f} %", f"{r['train_s_mean']:.1f}"] for r in sw])
        rows += table([tr(lang, f"heads pruned (of {total})", f"剪掉的头数（共 {total}）"), tr(lang, "cos to full, least important first", "与完整模型的余弦（先剪最不重要的）"),
                       tr(lang, "cos to full, random heads", "与完整模型的余弦（随机剪）")],
                      [[r["pruned"], f"{r['least_important']['mean_cos']:.4f} (min {r['least_important']['min_cos']:.4f})",
                        f"{r['random']['mean_cos']:.4f} (min {r['random']['min_cos']:.4f})"] for r in pr["rows"]])
        rows += "<p class='note'>" + tr(lang, "cos = cosine similarity of the pruned model's mean-pooled sentence embedding to the unpruned one, averaged over the held-out sentences (1 = unchanged).",
                                        "cos = 剪枝后模型的平均池化句向量与未剪枝模型句向量的余弦相似度，在留出句子上取平均（1 表示不变）。") + "</p>"
        html += details(tr(lang, "The sweep and the pruning, row by row", "扫描与剪枝的逐行数字"), rows)
        return Section(self.heading(lang), html)

    def summary(self, results, lang: str = "en", full_results=None):
        best = max(results["sweep"], key=lambda r: r["acc_mean"])
        pr = results["prune"]["rows"][-1]
        return (tr(lang, f"best head count {best['heads']}; {pr['pruned']} heads pruned → cos {pr['least_important']['mean_cos']:.3f}",
                   f"最佳头数 {best['heads']}；剪掉 {pr['pruned']} 个头 → 余弦 {pr['least_important']['mean_cos']:.3f}"),
                tr(lang, "heads are a budget to split, many are redundant", "头数是要分配的预算，很多头是冗余的"))


def _shape_sentence(sw: list, best: dict, most: dict, lang: str) -> str:
    """What the sweep's shape says, chosen by the numbers: still rising at the largest count, or flat/falling past a peak."""
    first = min(sw, key=lambda r: r["heads"])
    slow = most["train_s_mean"] / first["train_s_mean"] if first["train_s_mean"] > 0 else float("nan")
    if best is most:
        return tr(lang, f"Here accuracy still rose up to {most['heads']} heads, while training took {slow:.1f}× the time of one head. ",
                  f"在这里准确率一直升到 {most['heads']} 个头，而训练时间是单头的 {slow:.1f} 倍。")
    diff = 100 * (most["acc_mean"] - best["acc_mean"])
    noise = 100 * max(most["acc_std"], best["acc_std"])
    return tr(lang, f"Past {best['heads']} heads accuracy stopped improving ({diff:+.1f} points at {most['heads']} heads, seed spread "
                    f"{noise:.1f} points) while training took {slow:.1f}× the time of one head: splitting a fixed width into "
                    "more, smaller heads is a trade, not a free gain. ",
              f"超过 {best['heads']} 个头后准确率不再提高（{most['heads']} 个头时为 {diff:+.1f} 个百分点，种子间波动 {noise:.1f} 个百分点），"
              f"而训练时间是单头的 {slow:.1f} 倍：把固定宽度切成更多更小的头是一种取舍，而不是免费的收益。")


def _figure(sweep, prune, dim, lang: str = "en"):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    hs = [r["heads"] for r in sweep]
    a.errorbar(hs, [100 * r["acc_mean"] for r in sweep], yerr=[100 * r["acc_std"] for r in sweep], marker="o", capsize=4)
    a.set_xscale("log", base=2)
    a.set_xticks(hs)
    a.set_xticklabels([tr(lang, f"{h}\n(size {dim // h})", f"{h}\n（每头 {dim // h}）") for h in hs])
    a.set_xlabel(tr(lang, f"heads at width {dim} (per-head size)", f"宽度 {dim} 下的头数（每头维度）"))
    a.set_ylabel(tr(lang, "test accuracy (%), mean ± std over seeds", "测试准确率（%），种子间均值 ± 标准差"))
    a.set_title(tr(lang, "digits: head count at fixed width", "手写数字：固定宽度下的头数"))
    ks = [r["pruned"] for r in prune["rows"]]
    b.plot(ks, [r["least_important"]["mean_cos"] for r in prune["rows"]], marker="o", label=tr(lang, "least important first (ablation)", "先去掉最不重要的（消融）"))
    b.plot(ks, [r["random"]["mean_cos"] for r in prune["rows"]], marker="s", label=tr(lang, "random heads", "随机去掉"))
    b.set_xlabel(tr(lang, f"heads removed (of {prune['layers'] * prune['heads']})", f"去掉的头数（共 {prune['layers'] * prune['heads']} 个）"))
    b.set_ylabel(tr(lang, "cosine to the unpruned embedding", "与未剪枝句向量的余弦"))
    b.set_title(tr(lang, "all-MiniLM-L6-v2: pruning heads", "all-MiniLM-L6-v2：剪掉头"))
    b.legend()
    for ax in (a, b):
        ax.grid(True, alpha=0.3)
    return fig
