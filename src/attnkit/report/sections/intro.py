"""Report section 1: what attention is — score, normalise, weighted sum — in NumPy, next to
:func:`attnkit.attention`, and the two agreeing to rounding error.

Shape legend: B batch, H heads, L queries, S keys, E feature size.
"""

from __future__ import annotations

import numpy as np
import torch

from ... import attention, masks
from ...page.figures import heatmaps_figure, save
from ...page.html import esc, png_img, table
from ...page.i18n import tr
from ...page.story import SectionContext, StorySection

NUMPY_CODE = """import numpy as np
def attention_numpy(q, k, v, allowed=None):          # q (L, E), k (S, E), v (S, Ev)
    scores = q @ k.T / np.sqrt(q.shape[-1])          # 1. score every key for every query (L, S)
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)  #    masked pairs get -inf ...
    w = np.exp(scores - scores.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)                 # 2. normalise each row to sum to 1 (softmax)
    return w @ v, w                                  # 3. weighted sum of the values (L, Ev)

out = attnkit.attention(q, k, v, mask=attnkit.masks.causal(), return_weights=True)   # the same, any backend"""


def attention_numpy(q: np.ndarray, k: np.ndarray, v: np.ndarray, allowed: np.ndarray | None = None):
    """The three steps on (L, E), (S, E), (S, Ev) arrays; ``allowed`` (L, S) bool; returns (out, weights)."""
    scores = q @ k.T / np.sqrt(q.shape[-1])
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    w = np.exp(scores - scores.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    return w @ v, w


def steps_figure(scores: np.ndarray, w: np.ndarray):
    """Scores (L, S) and their softmax weights (L, S) side by side, each with its own colour bar: the
    two are different quantities (scores are any real number, weights lie in [0, 1])."""
    return heatmaps_figure([("1. scores  q·k / √E", scores), ("2. weights = softmax(scores) per row", w)],
                           xlabel="key position (t0 … t5)", ylabel="query position",
                           cbar=["score q·k / √E (unitless)", "weight (0 to 1, rows sum to 1)"],
                           vmin=None, vmax=None, cmap="viridis", height=4.0)


def compute(ctx: SectionContext) -> dict:
    g = torch.Generator().manual_seed(0)
    L, E = 6, 4
    q, k, v = (torch.randn(1, 1, L, E, generator=g, dtype=torch.float64) for _ in range(3))
    cases = {"plain": None, "causal": masks.causal(), "padding (4 of 6 keys)": masks.padding_mask([4], L)}
    rows = []
    for name, m in cases.items():
        res = attention(q, k, v, mask=m, return_weights=True)
        allowed = None if m is None else m.materialize(L, L, batch=1, heads=1).reshape(L, L).numpy()
        out_np, w_np = attention_numpy(q[0, 0].numpy(), k[0, 0].numpy(), v[0, 0].numpy(), allowed)
        rows.append({"case": name, "backend": res.report.backend,
                     "max_out_diff": float(np.abs(res.out[0, 0].numpy() - out_np).max()),
                     "max_w_diff": float(np.abs(res.weights[0, 0].numpy() - w_np).max()),
                     "row_sum_err": float(np.abs(res.weights[0, 0].sum(-1).numpy() - 1).max())})
    scores = (q[0, 0] @ k[0, 0].T / E ** 0.5).numpy()
    _, w = attention_numpy(q[0, 0].numpy(), k[0, 0].numpy(), v[0, 0].numpy())
    labels = [f"t{i}" for i in range(L)]
    d = ctx.dir("intro")
    png = save(steps_figure(scores, w), d / "steps.png")
    best = int(w[2].argmax())
    return {"rows": rows, "L": L, "E": E, "labels": labels, "q2_best": best, "q2_best_w": float(w[2, best]),
            "png": ctx.rel(png), "_files": [ctx.rel(png)]}


def render(data: dict, ctx: SectionContext, lang: str) -> str:
    worst = max(max(r["max_out_diff"], r["max_w_diff"]) for r in data["rows"])
    html = f"<pre>{esc(NUMPY_CODE)}</pre>"
    html += png_img(ctx.out / data["png"], "scores and weights")
    html += "<p>" + tr(
        lang,
        f"Measured now on {data['L']} random tokens of size {data['E']} in float64: NumPy's three steps and "
        f"<code>attnkit.attention</code> agree to {worst:.1e} at most (outputs and weights, {len(data['rows'])} calls), "
        f"and every row of weights sums to 1 within {max(r['row_sum_err'] for r in data['rows']):.1e}. "
        f"Query t2 gives its largest weight, {data['q2_best_w']:.2f}, to key t{data['q2_best']}: its output is mostly that key's value.",
        f"本次在 {data['L']} 个长度为 {data['E']} 的随机向量上用 float64 测得：NumPy 的三步与 <code>attnkit.attention</code> "
        f"最大差异为 {worst:.1e}（输出和权重，共 {len(data['rows'])} 次调用），每行权重之和与 1 的差不超过 "
        f"{max(r['row_sum_err'] for r in data['rows']):.1e}。查询 t2 把最大的权重 {data['q2_best_w']:.2f} 给了键 t{data['q2_best']}：它的输出主要就是这个键的值。",
    ) + "</p>"
    html += table([tr(lang, "call", "调用"), tr(lang, "backend auto chose", "auto 选择的后端"), tr(lang, "max |Δ output|", "输出最大差"),
                   tr(lang, "max |Δ weight|", "权重最大差"), tr(lang, "max |row sum − 1|", "行和与 1 的最大差")],
                  [[r["case"], r["backend"], f"{r['max_out_diff']:.1e}", f"{r['max_w_diff']:.1e}", f"{r['row_sum_err']:.1e}"] for r in data["rows"]])
    html += "<p class='note'>" + tr(lang, "Columns: Δ = attnkit minus NumPy, largest absolute difference over all entries.",
                                    "列说明：Δ = attnkit 减 NumPy，取所有元素中绝对值最大的差。") + "</p>"
    return html


def summary(data: dict, ctx: SectionContext, lang: str):
    worst = max(max(r["max_out_diff"], r["max_w_diff"]) for r in data["rows"])
    return (tr(lang, f"NumPy vs attnkit: max |Δ| {worst:.1e}", f"NumPy 与 attnkit：最大差 {worst:.1e}"),
            tr(lang, "attention = score, softmax, weighted sum", "注意力 = 打分、softmax、加权求和"))


ORDER = 10  # its place in the report: the first section


def section() -> StorySection:
    """This part of the report, with the question it answers and how to read its figure."""
    return StorySection(
        "intro", ("What attention is", "什么是注意力"),
        ("What does an attention layer compute, step by step?", "注意力层一步一步算的是什么？"),
        ("Left: the score of every (query, key) pair, one row per query. Right: the same rows after softmax — each row sums "
         "to 1 and says how much of each value goes into that query's output.",
         "左图：每个 (查询, 键) 对的分数，每行一个查询。右图：同样的行经过 softmax 之后——每行和为 1，表示每个值在该查询输出中所占的份额。"),
        compute, render, (__name__,), est_s={"quick": 2, "tiny": 1}, summary=summary, order=ORDER)
