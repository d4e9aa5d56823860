"""Misconception: "attention weights explain the prediction". On all-MiniLM-L6-v2, per layer, the
Spearman rank correlation between the attention each token receives and its attribution by
ablation — how much the sentence embedding moves when that token alone is replaced by [MASK].

Jain & Wallace 2019, "Attention is not Explanation", https://arxiv.org/abs/1902.10186 (the same
test on RNN classifiers); Wiegreffe & Pinter 2019, https://arxiv.org/abs/1908.04626 (its limits).

Per sentence of L tokens (B = 1): ``received[l, j]`` = mean over heads and queries of layer l's
weights (1, H, L, L) on key j; ``ablation[j]`` = 1 − cos(embedding, embedding with token j masked).
Both are compared over the content tokens only ([CLS]/[SEP] are never ablated). Nothing is
trained; a few seconds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ...page.figures import save_both
from ...page.html import details, figure, so_what, table
from ...page.i18n import tr
from ..lab.context import RunContext
from ..lab.registry import Experiment, register
from ..lab.results import Section
from ..lab.threads import threads

SENTENCES = [
    "The animal didn't cross the street because it was too tired.",
    "A quiet river runs past the old mill at the edge of town.",
    "She sold the car because the engine kept failing in winter.",
    "Researchers found that the new drug reduced fever in most patients.",
    "The committee postponed the vote until every member could attend.",
    "After the storm, volunteers cleared fallen trees from the roads.",
    "He forgot his umbrella, so he arrived at work completely soaked.",
    "The museum will open a new wing for modern sculpture next spring.",
]


def spearman(a, b) -> float:
    """Spearman's rho: Pearson correlation of the ranks (ties get their mean rank)."""
    from scipy.stats import rankdata

    ra, rb = rankdata(a), rankdata(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


@register
class MisconceptionExplain(Experiment):
    name = "misconceptions_explain"
    help = "misconception 'attention weights are explanations': MiniLM attention vs ablation attribution, per layer"
    quick = {"sentences": 8, "threads": 1}
    full = {"sentences": 8, "threads": None}
    tiny = {"sentences": 2}
    title = ("Misconception: attention weights are explanations", "误解：注意力权重就是解释")
    question = ("Do the tokens that receive the most attention matter most for the model's output?",
                "得到最多注意力的 token 对模型输出最重要吗？")
    how_to_read = (
        "Bars are the rank correlation per layer between attention received and importance measured by masking the token "
        "(+1 = same ranking, 0 = unrelated); whiskers are the spread over sentences.",
        "柱子是每层中“收到的注意力”与“遮住该 token 测得的重要性”之间的秩相关（+1 = 排序相同，0 = 无关）；误差线是不同句子间的离散程度。")
    report_order = 120
    lesson = "02_scores_and_alignment"  # the course lesson the report links under "Go deeper"
    est_s = {"quick": 5, "tiny": 8}
    run_in_report = True

    def run(self, ctx: RunContext) -> dict:
        with threads(ctx.config.get("threads")):
            return self._run(ctx)

    def _run(self, ctx: RunContext) -> dict:
        from ... import inspect as ak_inspect
        from ...models.bert import mean_pool
        from ...models.bert_loader import load_minilm

        model, tok = load_minilm()
        model.eval()
        mask_id = tok.tok.token_to_id("[MASK]")
        per_sentence = []
        for text in SENTENCES[: int(ctx.config["sentences"])]:
            b = tok([text])
            L = b.input_ids.shape[1]
            content = list(range(1, L - 1))
            with torch.no_grad():
                with ak_inspect.capture(model, record="weights") as rec:
                    h = model(**b.as_kwargs()).last_hidden_state
                base = torch.nn.functional.normalize(mean_pool(h, b.attention_mask), dim=-1)  # (1, D)
                ids = b.input_ids.repeat(len(content), 1)  # (n, L): row r masks token content[r]
                ids[torch.arange(len(content)), torch.tensor(content)] = mask_id
                hm = model(ids, b.attention_mask.repeat(len(content), 1), b.token_type_ids.repeat(len(content), 1)).last_hidden_state
                abl = torch.nn.functional.normalize(mean_pool(hm, b.attention_mask.repeat(len(content), 1)), dim=-1)
            attribution = (1 - (abl * base).sum(-1)).numpy()  # (n,)
            rhos, tops = [], []
            for w in rec.attentions:  # (1, H, L, L) per layer
                received = w.float()[0].mean(dim=(0, 1))[content].numpy()
                rhos.append(spearman(received, attribution))
                tops.append(int(received.argmax()) == int(attribution.argmax()))
            per_sentence.append({"text": text, "tokens": b.tokens[0], "rho": rhos, "top_agrees": tops,
                                 "attribution": attribution.tolist()})
        rho = np.array([s["rho"] for s in per_sentence])  # (sentences, layers)
        layers = [{"layer": l, "mean": float(np.nanmean(rho[:, l])), "std": float(np.nanstd(rho[:, l])),
                   "top_agree": float(np.mean([s["top_agrees"][l] for s in per_sentence]))} for l in range(rho.shape[1])]
        fig = _figure(layers)
        ctx.save_figure(fig, "rank_correlation.png")
        return {"layers": layers, "sentences": per_sentence, "n_sentences": len(per_sentence), "figure": "rank_correlation.png"}

    def report(self, results, out_dir, lang: str = "en", full_results=None) -> Section:

        ls = results["layers"]
        best = max(ls, key=lambda r: r["mean"])
        worst = min(ls, key=lambda r: r["mean"])
        n = results["n_sentences"]
        text = tr(lang,
                  f"On {n} sentences, the rank correlation between the attention a token receives and how much the sentence embedding "
                  f"changes when that token is masked ranges from {worst['mean']:+.2f} (layer {worst['layer']}) to {best['mean']:+.2f} "
                  f"(layer {best['layer']}); the most-attended token is also the most important one in "
                  f"{100 * max(r['top_agree'] for r in ls):.0f} % of sentences at best. A reader of layer {worst['layer']} would conclude that "
                  f"attention is unrelated to importance, a reader of layer {best['layer']} that it explains it: the weights say where the softmax "
                  "put its mass, not what the output depends on. Measure importance by intervening (ablation, gradients).",
                  f"在 {n} 个句子上，token 收到的注意力与遮住该 token 后句向量变化量之间的秩相关系数从 {worst['mean']:+.2f}（第 {worst['layer']} 层）"
                  f"到 {best['mean']:+.2f}（第 {best['layer']} 层）；被关注最多的 token 同时也是最重要的 token 的比例最高只有 "
                  f"{100 * max(r['top_agree'] for r in ls):.0f}%。只看第 {worst['layer']} 层的人会认为注意力与重要性无关，只看第 {best['layer']} 层的人"
                  "会认为注意力解释了输出：权重只说明 softmax 把质量放在哪里，并不说明输出依赖什么。重要性要通过干预（消融、梯度）来测量。")
        png = save_both(Path(out_dir) / "figures" / self.name / results["figure"], lambda lg: _figure(ls, lg))[0]
        html = f"<p>{text}</p>" + figure(png, tr(lang, "rank correlation per layer", "每层的秩相关"), lang)
        html += so_what(lang, tr(lang, "A large attention weight is not evidence that a token matters for the output: depending on the layer, "
                                       "the two agree, disagree or are unrelated. To find what matters, change the input or the model and "
                                       "measure the output.",
                                 "注意力权重大，并不能证明一个 token 对输出重要：随层不同，两者可能一致、相反或无关。"
                                 "要找出什么重要，就改变输入或模型，再测量输出。"))
        rows = table([tr(lang, "layer", "层"), tr(lang, "Spearman ρ, mean over sentences", "Spearman ρ（句子平均）"), tr(lang, "std", "标准差"),
                       tr(lang, "top token agrees", "最高 token 一致的比例")],
                      [[r["layer"], f"{r['mean']:+.2f}", f"{r['std']:.2f}", f"{100 * r['top_agree']:.0f} %"] for r in ls])
        rows += "<p class='note'>" + tr(lang, "ρ = +1: attention ranks tokens exactly as ablation does; 0: no relation; −1: reversed.",
                                        "ρ = +1：注意力对 token 的排序与消融完全一致；0：无关；−1：完全相反。") + "</p>"
        html += details(tr(lang, "Per layer: correlation and agreement", "逐层：相关系数与一致比例"), rows)
        return Section(self.heading(lang), html)

    def summary(self, results, lang: str = "en", full_results=None):
        ls = results["layers"]
        lo, hi = min(r["mean"] for r in ls), max(r["mean"] for r in ls)
        return (tr(lang, f"Spearman ρ per layer from {lo:+.2f} to {hi:+.2f}", f"各层 Spearman ρ 从 {lo:+.2f} 到 {hi:+.2f}"),
                tr(lang, "attention is not a measured importance", "注意力不等于测得的重要性"))


def _figure(layers: list[dict], lang: str = "en"):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 3.8), constrained_layout=True)
    x = [r["layer"] for r in layers]
    ax.bar(x, [r["mean"] for r in layers], yerr=[r["std"] for r in layers], color="#1f77b4", capsize=4)
    ax.axhline(0, color="#444", linewidth=0.8)
    ax.set_ylim(-1, 1)
    ax.set_xlabel(tr(lang, "layer of all-MiniLM-L6-v2", "all-MiniLM-L6-v2 的层"))
    ax.set_ylabel(tr(lang, "Spearman ρ (attention received vs ablation)", "Spearman ρ（收到的注意力 vs 消融）"))
    ax.set_title(tr(lang, "Does attention rank tokens like their measured importance? (mean ± std over sentences)",
                    "注意力对 token 的排序与实测重要性一致吗？（句子间均值 ± 标准差）"))
    ax.set_xticks(x)
    ax.grid(True, axis="y", alpha=0.3)
    return fig
