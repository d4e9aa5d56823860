"""``scoring``: five scoring functions side by side, and what dividing by sqrt(d) prevents.

A score turns a query and a key into one number before the softmax: dot ``q·k``; scaled dot
``q·k / sqrt(d)`` (Vaswani et al. 2017, https://arxiv.org/abs/1706.03762); general ``qᵀ W k`` and
additive ``vᵀ tanh(W_q q + W_k k)`` (Luong et al. 2015, https://arxiv.org/abs/1508.04025; Bahdanau
et al. 2015, https://arxiv.org/abs/1409.0473); cosine ``τ · cos(q, k)``.

Why sqrt(d): with q and k of unit-variance components (what a layer norm before the projections
gives), ``q·k`` is a sum of d products, so its standard deviation grows as sqrt(d). The softmax of
ever wider scores puts almost all weight on one key (it *saturates*), and its Jacobian
``diag(p) − p pᵀ`` goes to zero, so no gradient flows back. Dividing by sqrt(d) keeps the scores'
spread at 1 for every d. Measured here on random q, k (nothing is trained; a few seconds):

* normalised entropy ``H(p) / log S`` of each query's weights (1 = uniform, 0 = one key) and the
  largest weight, per d, scaled and unscaled;
* the gradient that reaches the scores, ``|∂ loss / ∂ scores|`` for a fixed random upstream gradient;
* the same two statistics for the five attnkit scores at their default initialisation.

Shapes: q (B, 1, L, d), k (B, 1, S, d), weights (B, 1, L, S).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from ...core import scores as ak_scores
from ...core.call import attention
from ...page.figures import save_both
from ...page.html import details, figure, so_what, table
from ...page.i18n import tr
from ..lab.context import RunContext
from ..lab.registry import Experiment, register
from ..lab.results import Section


def weight_stats(w: torch.Tensor) -> dict:
    """Mean normalised entropy, mean largest weight and the share of saturated rows (largest weight
    above 0.99) of attention rows ``w`` (..., S)."""
    S = w.shape[-1]
    ent = -(w * w.clamp_min(1e-30).log()).sum(-1) / math.log(S)
    top = w.max(-1).values
    return {"entropy": float(ent.mean()), "max_weight": float(top.mean()), "saturated": float((top > 0.99).double().mean())}


def score_gradient(logits: torch.Tensor, upstream: torch.Tensor) -> float:
    """Median over query rows of |∂(Σ softmax(logits) · upstream)/∂logits|: how much gradient the
    softmax lets through for a typical query (a saturated row passes almost none)."""
    x = logits.detach().requires_grad_(True)
    (torch.softmax(x, -1) * upstream).sum().backward()
    return float(x.grad.norm(dim=-1).median())


def sweep(dims: list[int], batch: int, length: int, seed: int) -> list[dict]:
    """Per d: entropy, largest weight and score gradient of dot-product attention, scaled and not."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for d in dims:
        q = torch.randn(batch, 1, length, d, generator=g, dtype=torch.float64)
        k = torch.randn(batch, 1, length, d, generator=g, dtype=torch.float64)
        up = torch.randn(batch, 1, length, length, generator=g, dtype=torch.float64)
        raw = q @ k.transpose(-2, -1)  # (B, 1, L, S): std grows as sqrt(d)
        row = {"d": d, "score_std": float(raw.std())}
        for tag, logits in (("unscaled", raw), ("scaled", raw / math.sqrt(d))):
            row[tag] = {**weight_stats(torch.softmax(logits, -1)), "grad_median": score_gradient(logits, up)}
        rows.append(row)
    return rows


def _make_score(name: str, d: int):
    """A score by name: the learned ones are built at their default initialisation for head size d."""
    if name == "general":
        return ak_scores.GeneralScore(d)
    if name == "additive":
        return ak_scores.AdditiveScore(d)
    return name  # dot, scaled_dot, cosine: named scores without weights


def compare_scores(dims: list[int], batch: int, length: int, seed: int) -> list[dict]:
    """The five attnkit scores at their default initialisation, weights from :func:`attnkit.attention`."""
    out = []
    for name in ("dot", "scaled_dot", "general", "additive", "cosine"):
        row = {"score": name, "per_d": []}
        for d in dims:
            torch.manual_seed(seed)
            g = torch.Generator().manual_seed(seed)
            q, k, v = (torch.randn(batch, 1, length, d, generator=g) for _ in range(3))
            score = _make_score(name, d)
            params = sum(p.numel() for p in score.parameters()) if isinstance(score, torch.nn.Module) else 0
            with torch.no_grad():
                w = attention(q, k, v, score=score, return_weights=True).weights.double()  # (B, 1, L, S)
            row["per_d"].append({"d": d, "params": params, **weight_stats(w)})
        out.append(row)
    return out


@register
class Scoring(Experiment):
    name = "scoring"
    help = "five scoring functions side by side; softmax saturation and gradient size against d, with and without 1/sqrt(d)"
    quick = {"dims": [4, 8, 16, 32, 64, 128, 256, 512, 1024], "batch": 16, "length": 64, "compare_dims": [16, 256]}
    full = {**quick, "batch": 64}
    tiny = {"dims": [8, 64, 512], "batch": 4, "length": 32}
    seeds = 1
    title = ("Scoring functions, and why scores are divided by √d", "打分函数，以及为什么要除以 √d")
    question = ("How do the common ways of scoring a query against a key differ, and what does dividing by √d prevent?",
                "常见的查询–键打分方式有何不同？除以 √d 防止了什么？")
    how_to_read = (
        "Left: how spread out each query's weights are (1 = uniform over the keys, 0 = all on one key) as the vector size d grows, "
        "with and without dividing by √d; right: the size of the gradient that reaches the scores. Log-scaled d.",
        "左图：随向量维度 d 增大，每个查询的权重有多分散（1 = 在所有键上均匀，0 = 全部落在一个键上），分别为除以 √d 与不除；"
        "右图：传回到分数上的梯度大小。d 为对数坐标。")
    report_order = 15
    lesson = "02_scores_and_alignment"
    est_s = {"quick": 4, "tiny": 2}
    run_in_report = True

    def run(self, ctx: RunContext) -> dict:
        c = ctx.config
        rows = sweep(list(c["dims"]), int(c["batch"]), int(c["length"]), ctx.seeds[0])
        cmp = compare_scores(list(c["compare_dims"]), int(c["batch"]), int(c["length"]), ctx.seeds[0])
        if ctx.is_main:
            ctx.save_figure(_figure(rows), "saturation.png")
        return {"sweep": rows, "compare": cmp, "length": int(c["length"]), "figure": "saturation.png"}

    def report(self, results, out_dir, lang: str = "en", full_results=None) -> Section:
        rows, S = results["sweep"], results["length"]
        lo, hi = rows[0], rows[-1]
        text = tr(lang,
                  f"With unit-variance q and k over {S} keys, the raw dot product's spread grew from {lo['score_std']:.1f} at d = {lo['d']} "
                  f"to {hi['score_std']:.1f} at d = {hi['d']}. Unscaled, the weights' normalised entropy fell from "
                  f"{lo['unscaled']['entropy']:.2f} to {hi['unscaled']['entropy']:.2f} and the largest weight rose to "
                  f"{hi['unscaled']['max_weight']:.2f} ({100 * hi['unscaled']['saturated']:.0f} % of queries put over 99 % on one key): "
                  f"the softmax picks one key, and a typical query's gradient at the scores fell "
                  f"{lo['unscaled']['grad_median'] / max(hi['unscaled']['grad_median'], 1e-300):.0f}-fold. Scaled by 1/√d, the entropy stayed between "
                  f"{min(r['scaled']['entropy'] for r in rows):.3f} and {max(r['scaled']['entropy'] for r in rows):.3f} for every d.",
                  f"q、k 各分量方差为 1、共 {S} 个键时，原始点积的标准差从 d = {lo['d']} 时的 {lo['score_std']:.1f} 增长到 d = {hi['d']} 时的 "
                  f"{hi['score_std']:.1f}。不缩放时，权重的归一化熵从 {lo['unscaled']['entropy']:.2f} 降到 {hi['unscaled']['entropy']:.2f}，"
                  f"最大权重升到 {hi['unscaled']['max_weight']:.2f}（{100 * hi['unscaled']['saturated']:.0f}% 的查询把 99% 以上的权重放在一个键上）：softmax 只挑出一个键，典型查询传回分数的梯度缩小了 "
                  f"{lo['unscaled']['grad_median'] / max(hi['unscaled']['grad_median'], 1e-300):.0f} 倍。乘以 1/√d 后，任何 d 下熵都保持在 "
                  f"{min(r['scaled']['entropy'] for r in rows):.3f} 到 {max(r['scaled']['entropy'] for r in rows):.3f} 之间。")
        png = save_both(Path(out_dir) / "figures" / self.name / results["figure"], lambda lg: _figure(rows, lg))[0]
        html = f"<p>{text}</p>" + figure(png, tr(lang, "softmax saturation against d", "softmax 饱和度随 d 的变化"), lang)
        html += so_what(lang, tr(lang,
                                 "Entropy here means how evenly a query spreads its weight (1 = evenly over all keys). Without the 1/√d factor, "
                                 "wider heads make attention pick a single key at initialisation and starve it of gradient, so training stalls; "
                                 "the factor is not a tuning knob but what keeps the softmax in its useful range. Bounded scores (additive, "
                                 "cosine) do not grow with d at all, which is why they need no such factor.",
                                 "这里的熵表示一个查询把权重分得有多均匀（1 = 在所有键上均匀）。没有 1/√d，头越宽，初始化时注意力就越只挑一个键，"
                                 "梯度也几乎为零，训练因此停滞；这个因子不是调参旋钮，而是让 softmax 保持在可用范围内的条件。"
                                 "有界的打分（加性、余弦）根本不随 d 增长，所以不需要这个因子。"))
        names = {"dot": ("dot  q·k", "点积 q·k"), "scaled_dot": ("scaled dot  q·k/√d", "缩放点积 q·k/√d"),
                 "general": ("general  qᵀWk (Luong)", "general qᵀWk（Luong）"), "additive": ("additive  vᵀtanh(W_q q+W_k k) (Bahdanau)", "加性 vᵀtanh(W_q q+W_k k)（Bahdanau）"),
                 "cosine": ("cosine  τ·cos(q,k), τ=10", "余弦 τ·cos(q,k)，τ=10")}
        cmp_rows = [[tr(lang, *names[r["score"]]), p["d"], p["params"], f"{p['entropy']:.2f}", f"{p['max_weight']:.2f}"]
                    for r in results["compare"] for p in r["per_d"]]
        body = table([tr(lang, "score", "打分函数"), "d", tr(lang, "learned parameters", "可学习参数"),
                      tr(lang, "normalised entropy", "归一化熵"), tr(lang, "largest weight", "最大权重")], cmp_rows)
        body += "<p class='note'>" + tr(lang, "Default initialisation, random unit-variance q and k, weights from attnkit.attention. "
                                              "General starts as the identity matrix, so it behaves like the unscaled dot product until trained.",
                                        "默认初始化，q、k 为方差 1 的随机向量，权重由 attnkit.attention 计算。general 的 W 初始化为单位阵，"
                                        "因此训练前它的表现与不缩放的点积相同。") + "</p>"
        html += details(tr(lang, "The five scoring functions at d = 16 and 256", "五种打分函数在 d = 16 与 256 时"), body)
        return Section(self.heading(lang), html)

    def summary(self, results, lang: str = "en", full_results=None):
        hi = results["sweep"][-1]
        return (tr(lang, f"d = {hi['d']}: entropy {hi['unscaled']['entropy']:.2f} unscaled vs {hi['scaled']['entropy']:.2f} scaled",
                   f"d = {hi['d']}：熵 不缩放 {hi['unscaled']['entropy']:.2f}，缩放 {hi['scaled']['entropy']:.2f}"),
                tr(lang, "1/√d keeps the softmax from saturating", "1/√d 防止 softmax 饱和"))


def _figure(rows: list[dict], lang: str = "en"):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = [r["d"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8), constrained_layout=True)
    for tag, color, label in (("scaled", "#1f77b4", tr(lang, "q·k / √d", "q·k / √d")), ("unscaled", "#d62728", tr(lang, "q·k (unscaled)", "q·k（不缩放）"))):
        a.plot(d, [r[tag]["entropy"] for r in rows], marker="o", color=color, label=label)
        a.plot(d, [r[tag]["max_weight"] for r in rows], marker="s", linestyle="--", color=color, alpha=0.6,
               label=tr(lang, f"largest weight, {label}", f"最大权重，{label}"))
        b.plot(d, [r[tag]["grad_median"] for r in rows], marker="o", color=color, label=label)
    a.set_xscale("log", base=2)
    a.set_ylim(0, 1.05)
    a.set_xlabel(tr(lang, "vector size d", "向量维度 d"))
    a.set_ylabel(tr(lang, "entropy / log S (solid), largest weight (dashed)", "熵 / log S（实线），最大权重（虚线）"))
    a.set_title(tr(lang, "How spread out are the weights?", "权重有多分散？"))
    a.legend(fontsize=8)
    b.set_xscale("log", base=2)
    b.set_yscale("log")
    b.set_xlabel(tr(lang, "vector size d", "向量维度 d"))
    b.set_ylabel(tr(lang, "gradient at the scores, median over queries", "分数处梯度（查询的中位数）"))
    b.set_title(tr(lang, "How much gradient gets through?", "能传回多少梯度？"))
    b.legend(fontsize=8)
    for ax in (a, b):
        ax.grid(True, alpha=0.3)
    return fig
