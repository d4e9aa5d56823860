"""``transformer_block``: what breaks when one piece of the Transformer block is removed.

Task: sort a sequence of L random digits (output position i = the i-th smallest input digit). It
needs attention to compare contents (which digits are present and how many) and positions (which
rank position i must output), so it exercises every piece. The model is :mod:`.model`'s tiny
pre-norm encoder; each variant removes one piece (residuals, layer norms, the sinusoidal
positions) and is trained from the same seeds with the same steps; accuracy is per output token on
held-out sequences, mean ± std over seeds. Chance is 1 / vocabulary; without positions the model
still knows which digits are present (the multiset), which gets part of the way, but every position
sees the same set, so it cannot tell which rank to output.

Shapes: tokens (B, L), logits (B, L, V).
"""

from __future__ import annotations

import statistics
from pathlib import Path

import torch
from torch.nn import functional as F

from ...page.figures import save_both
from ...page.html import details, figure, so_what, table
from ...page.i18n import tr
from ..lab.context import RunContext
from ..lab.registry import Experiment, register
from ..lab.results import Section
from ..lab.threads import threads
from .model import VARIANTS, TinyTransformer


def sort_batch(n: int, length: int, vocab: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randint(0, vocab, (n, length), generator=g)  # (N, L)
    return x, x.sort(1).values


def train_one(variant: str, seed: int, c: dict) -> dict:
    """Train one variant from ``seed``; returns held-out token accuracy and the loss curve."""
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(1000 + seed)
    model = TinyTransformer(c["vocab"], c["length"], c["dim"], c["heads"], c["layers"], VARIANTS[variant])
    opt = torch.optim.Adam(model.parameters(), lr=c["lr"])
    losses = []
    for _ in range(c["steps"]):
        x, y = sort_batch(c["batch"], c["length"], c["vocab"], g)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    xv, yv = sort_batch(c["n_val"], c["length"], c["vocab"], torch.Generator().manual_seed(99))
    with torch.no_grad():
        acc = float((model(xv).argmax(-1) == yv).float().mean())
    return {"acc": acc, "loss": losses}


@register
class TransformerBlockAblation(Experiment):
    name = "transformer_block"
    help = "a tiny Transformer sorts digits; remove residuals, layer norm or sinusoidal positions and measure what breaks"
    quick = {"vocab": 10, "length": 8, "dim": 32, "heads": 2, "layers": 2, "steps": 120, "batch": 64, "lr": 0.006,
             "n_val": 1000, "seeds": 3, "threads": 1}
    full = {**quick, "layers": 4, "steps": 1000, "lr": 0.003, "seeds": 5, "threads": None}
    tiny = {"steps": 80, "seeds": 2, "n_val": 300}
    seeds = 3
    title = ("The Transformer block: residuals, layer norm, positions", "Transformer 块：残差、层归一化与位置编码")
    question = ("What does each piece of the Transformer block contribute? Remove one at a time and measure.",
                "Transformer 块的每个部件贡献了什么？一次去掉一个，测量结果。")
    how_to_read = (
        "Left: held-out accuracy of sorting digits, per variant (bars: mean over seeds, dots: each seed); the dashed line is chance. "
        "Right: training loss per step (mean over seeds).",
        "左图：各变体在留出数据上的排序准确率（柱：种子平均，点：每个种子）；虚线是随机水平。右图：每步的训练损失（种子平均）。")
    report_order = 65
    lesson = "05_transformer_block"
    est_s = {"quick": 15, "tiny": 6}
    run_in_report = True

    def run(self, ctx: RunContext) -> dict:
        c = ctx.config
        per = {}
        with threads(c.get("threads")):
            for variant in VARIANTS:
                runs = [train_one(variant, s, c) for s in ctx.seeds]
                accs = [r["acc"] for r in runs]
                curve = [statistics.fmean(r["loss"][i] for r in runs) for i in range(c["steps"])]
                per[variant] = {"acc": accs, "acc_mean": statistics.fmean(accs),
                                "acc_std": statistics.stdev(accs) if len(accs) > 1 else 0.0, "loss": curve}
                ctx.log(f"{variant}: accuracy {per[variant]['acc_mean']:.3f} ± {per[variant]['acc_std']:.3f}")
        out = {"variants": per, "chance": 1 / c["vocab"], "steps": c["steps"], "layers": c["layers"], "n_seeds": len(ctx.seeds),
               "figure": "ablation.png"}
        if ctx.is_main:
            ctx.save_figure(_figure(out), "ablation.png")
        return out

    def report(self, results, out_dir, lang: str = "en", full_results=None) -> Section:
        v = results["variants"]
        full = v["full"]
        parts_en, parts_zh, harmless = [], [], []
        names = {"no residual": ("without residuals", "去掉残差"), "no layer norm": ("without layer norm", "去掉层归一化"),
                 "no positions": ("without positions", "去掉位置编码")}
        for k, (en, zh) in names.items():
            r = v[k]
            parts_en.append(f"{en} {100 * r['acc_mean']:.1f} % ± {100 * r['acc_std']:.1f}")
            parts_zh.append(f"{zh}为 {100 * r['acc_mean']:.1f}% ± {100 * r['acc_std']:.1f}")
            if full["acc_mean"] - r["acc_mean"] <= 2 * max(full["acc_std"], r["acc_std"], 0.005):
                harmless.append((en, zh))
        text = tr(lang,
                  f"Sorting {results['n_seeds']} seeds × {results['steps']} steps with {results['layers']} blocks: the full block reached "
                  f"{100 * full['acc_mean']:.1f} % ± {100 * full['acc_std']:.1f} token accuracy (chance {100 * results['chance']:.0f} %); "
                  + "; ".join(parts_en) + ".",
                  f"排序任务，{results['n_seeds']} 个种子 × {results['steps']} 步，{results['layers']} 个块：完整的块达到 "
                  f"{100 * full['acc_mean']:.1f}% ± {100 * full['acc_std']:.1f} 的逐 token 准确率（随机水平 {100 * results['chance']:.0f}%）；"
                  + "；".join(parts_zh) + "。")
        if harmless:
            text += " " + tr(lang, "At this size, " + " and ".join(e for e, _ in harmless) + " the model did about as well (within twice the "
                                   "seed spread): that piece matters more in deeper models and longer training than fit in a report.",
                             "在这个规模下，" + "、".join(z for _, z in harmless) + "的模型表现差不多（在种子离散程度的两倍以内）："
                             "这个部件在更深的模型和更长的训练中更重要，而报告里放不下那样的训练。")
        png = save_both(Path(out_dir) / "figures" / self.name / results["figure"], lambda lg: _figure(results, lg))[0]
        html = f"<p>{text}</p>" + figure(png, tr(lang, "accuracy per removed piece", "去掉各部件后的准确率"), lang)
        html += so_what(lang, tr(lang,
                                 "A residual connection adds a block's output to its input, so a block only has to learn a correction and "
                                 "gradients reach early layers directly; layer norm rescales each token's vector so activations stay in range; "
                                 "positional encoding is the only place word order enters, because attention itself treats its inputs as a set. "
                                 "Without positions the model is provably blind to order (permuting its input permutes its output), so a task that "
                                 "depends on order can be learned only as far as the set of tokens alone reveals, however long you train.",
                                 "残差连接把块的输出加到输入上，于是每个块只需学习一个修正，梯度也能直接传到前面的层；层归一化重新缩放每个 token 的向量，"
                                 "使激活保持在合理范围；位置编码是词序进入模型的唯一途径，因为注意力本身把输入当作集合。"
                                 "没有位置编码时，模型可证明地对顺序不敏感（打乱输入只会同样地打乱输出），所以一个依赖顺序的任务，无论训练多久，"
                                 "也只能学到仅凭 token 集合就能知道的那部分。"))
        rows = [[tr(lang, *{"full": ("full block", "完整的块"), **names}[k]), f"{100 * r['acc_mean']:.1f} %", f"{100 * r['acc_std']:.1f}",
                 ", ".join(f"{100 * a:.1f}" for a in r["acc"])] for k, r in v.items()]
        html += details(tr(lang, "Accuracy per variant and seed", "各变体与各种子的准确率"),
                        table([tr(lang, "variant", "变体"), tr(lang, "mean accuracy", "平均准确率"), tr(lang, "std", "标准差"),
                               tr(lang, "per seed, %", "每个种子，%")], rows))
        return Section(self.heading(lang), html)

    def summary(self, results, lang: str = "en", full_results=None):
        v = results["variants"]
        worst = min((k for k in v if k != "full"), key=lambda k: v[k]["acc_mean"])
        zh = {"no residual": "去掉残差", "no layer norm": "去掉层归一化", "no positions": "去掉位置编码"}[worst]
        return (tr(lang, f"full {100 * v['full']['acc_mean']:.0f} %; worst {worst}: {100 * v[worst]['acc_mean']:.0f} %",
                   f"完整 {100 * v['full']['acc_mean']:.0f}%；最差为{zh}：{100 * v[worst]['acc_mean']:.0f}%"),
                tr(lang, "each piece of the block carries weight", "块的每个部件都不可或缺"))


def _figure(results: dict, lang: str = "en"):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    v = results["variants"]
    labels = {"full": tr(lang, "full", "完整"), "no residual": tr(lang, "no residual", "无残差"),
              "no layer norm": tr(lang, "no layer norm", "无层归一化"), "no positions": tr(lang, "no positions", "无位置编码")}
    colors = ["#2ca02c", "#d62728", "#ff7f0e", "#9467bd"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8), constrained_layout=True)
    for i, (k, r) in enumerate(v.items()):
        a.bar(i, 100 * r["acc_mean"], yerr=100 * r["acc_std"], color=colors[i], capsize=4)
        a.scatter([i] * len(r["acc"]), [100 * x for x in r["acc"]], color="black", s=12, zorder=3)
        b.plot(range(1, len(r["loss"]) + 1), r["loss"], color=colors[i], label=labels[k])
    a.axhline(100 * results["chance"], color="grey", linestyle="--")
    a.set_xticks(range(len(v)), [labels[k] for k in v])
    a.set_ylim(0, 100)
    a.set_ylabel(tr(lang, "held-out token accuracy, %", "留出数据逐 token 准确率，%"))
    a.set_title(tr(lang, "Sorting digits: accuracy per variant", "数字排序：各变体的准确率"))
    b.set_yscale("log")
    b.set_xlabel(tr(lang, "training step", "训练步"))
    b.set_ylabel(tr(lang, "training loss", "训练损失"))
    b.set_title(tr(lang, "Training loss (mean over seeds)", "训练损失（种子平均）"))
    b.legend(fontsize=8)
    for ax in (a, b):
        ax.grid(True, alpha=0.3)
    return fig
