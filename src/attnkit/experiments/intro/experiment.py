"""``intro``: what an attention layer computes, step by step: score every key for every query,
softmax each row, return the weighted sum of the values (Vaswani et al. 2017,
https://arxiv.org/abs/1706.03762), written in NumPy beside :func:`attnkit.attention`.

Measured: on a few random float64 tokens, NumPy's three steps and ``attnkit.attention`` (no mask,
causal, padding) agree to rounding error, and every row of weights sums to 1. Drawn: the scores
and their softmax weights, and average pooling's fixed weights beside attention's per-query ones.
Nothing is trained; under a second.

Shape legend: B batch, H heads, L queries, S keys, E feature size.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ... import attention, masks
from ...page.figures import heatmaps_figure, pick, save_both
from ...page.html import details, esc, figure, so_what, table
from ...page.i18n import tr
from ..lab.context import RunContext
from ..lab.registry import Experiment, register
from ..lab.results import Section

NUMPY_CODE = {"en": """import numpy as np
def attention_numpy(q, k, v, allowed=None):          # q (L, E), k (S, E), v (S, Ev)
    scores = q @ k.T / np.sqrt(q.shape[-1])          # 1. score every key for every query (L, S)
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)  #    masked pairs get -inf ...
    w = np.exp(scores - scores.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)                 # 2. normalise each row to sum to 1 (softmax)
    return w @ v, w                                  # 3. weighted sum of the values (L, Ev)

out = attnkit.attention(q, k, v, mask=attnkit.masks.causal(), return_weights=True)   # the same, any backend""",
              "zh": """import numpy as np
def attention_numpy(q, k, v, allowed=None):          # q (L, E)，k (S, E)，v (S, Ev)
    scores = q @ k.T / np.sqrt(q.shape[-1])          # 1. 每个查询给每个键打分 (L, S)
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)  #    被掩码的配对记为 -inf ……
    w = np.exp(scores - scores.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)                 # 2. 每行归一化，和为 1（softmax）
    return w @ v, w                                  # 3. 对值加权求和 (L, Ev)

out = attnkit.attention(q, k, v, mask=attnkit.masks.causal(), return_weights=True)   # 同样的计算，任意后端"""}


def attention_numpy(q: np.ndarray, k: np.ndarray, v: np.ndarray, allowed: np.ndarray | None = None):
    """The three steps on (L, E), (S, E), (S, Ev) arrays; ``allowed`` (L, S) bool; returns (out, weights)."""
    scores = q @ k.T / np.sqrt(q.shape[-1])
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    w = np.exp(scores - scores.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    return w @ v, w


def steps_figure(scores: np.ndarray, w: np.ndarray, lang: str = "en"):
    """Scores (L, S) and their softmax weights (L, S) side by side, each with its own colour bar: the
    two are different quantities (scores are any real number, weights lie in [0, 1])."""
    t = lambda en, zh: pick(lang, en, zh)  # noqa: E731
    return heatmaps_figure([(t("1. scores  q·k / √E", "1. 分数 q·k / √E"), scores),
                            (t("2. weights = softmax(scores) per row", "2. 权重 = 每行 softmax(分数)"), w)],
                           xlabel=t("key position (t0 … t5)", "键的位置（t0 … t5）"), ylabel=t("query position", "查询的位置"),
                           cbar=[t("score q·k / √E (unitless)", "分数 q·k / √E（无单位）"),
                                 t("weight (0 to 1, rows sum to 1)", "权重（0 到 1，每行和为 1）")],
                           vmin=None, vmax=None, cmap="viridis", height=4.0)


def static_dynamic_figure(w: np.ndarray, lang: str = "en"):
    """Average pooling's weights (every query the same row, 1/S) beside attention's (each query its
    own row), on one 0-to-1 colour scale: the picture of "dynamic weighting"."""
    t = lambda en, zh: pick(lang, en, zh)  # noqa: E731
    static = np.full_like(w, 1.0 / w.shape[1])
    return heatmaps_figure([(t("average pooling: the same weights for every query", "平均池化：每个查询的权重都一样"), static),
                            (t("attention: each query computes its own weights", "注意力：每个查询自己算权重"), w)],
                           xlabel=t("key (position it reads from)", "键（被读取的位置）"), ylabel=t("query (position being built)", "查询（正在计算输出的位置）"),
                           cbar=t("weight (each row sums to 1)", "权重（每行和为 1）"), vmin=0.0, vmax=1.0, cmap="viridis", height=3.8)


def measure(L: int, E: int, seed: int) -> tuple[dict, np.ndarray, np.ndarray]:
    """NumPy's three steps against ``attnkit.attention`` on L random float64 tokens of size E, per
    mask (none, causal, padding): the largest differences and row-sum error; also the plain call's
    scores (L, S) and weights (L, S), for the figures."""
    g = torch.Generator().manual_seed(seed)
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
    scores = (q[0, 0] @ k[0, 0].T / E ** 0.5).numpy()  # (L, S)
    _, w = attention_numpy(q[0, 0].numpy(), k[0, 0].numpy(), v[0, 0].numpy())
    best = int(w[2].argmax())
    data = {"rows": rows, "L": L, "E": E, "labels": [f"t{i}" for i in range(L)], "q2_best": best, "q2_best_w": float(w[2, best]),
            "score_range": [float(scores.min()), float(scores.max())]}
    return data, scores, w


@register
class Intro(Experiment):
    name = "intro"
    help = "what attention computes: score, softmax, weighted sum in NumPy beside attnkit.attention, agreeing to rounding error"
    quick = {"tokens": 6, "dim": 4}
    full = quick
    tiny = {}  # already a second
    seeds = 1
    title = ("What attention is", "什么是注意力")
    question = ("What does an attention layer compute, step by step?", "注意力层一步一步算的是什么？")
    how_to_read = (
        "In every heatmap a row is one query and a column one key. In the second figure, left: the score of every (query, key) pair; "
        "right: the same rows after softmax — each row sums to 1 and says how much of each value goes into that query's output.",
        "每幅热力图中，一行是一个查询，一列是一个键。第二幅图左边是每个 (查询, 键) 对的分数；右边是同样的行经过 softmax 之后——"
        "每行和为 1，表示每个值在该查询输出中所占的份额。")
    report_order = 10  # the first section
    lesson = "01_attention_from_scratch"
    est_s = {"quick": 2, "tiny": 1}
    run_in_report = True

    def run(self, ctx: RunContext) -> dict:
        c = ctx.config
        data, scores, w = measure(int(c["tokens"]), int(c["dim"]), ctx.seeds[0])
        if ctx.is_main:
            save_both(ctx.out / "steps.png", lambda lang: steps_figure(scores, w, lang))
            save_both(ctx.out / "dynamic.png", lambda lang: static_dynamic_figure(w, lang))
        return {**data, "figures": {"steps": "steps.png", "dynamic": "dynamic.png"}}

    def report(self, results, out_dir, lang: str = "en", full_results=None) -> Section:
        return Section(self.heading(lang), render(results, Path(results.run_dir), lang))

    def summary(self, results, lang: str = "en", full_results=None):
        worst = max(max(r["max_out_diff"], r["max_w_diff"]) for r in results["rows"])
        return (tr(lang, f"NumPy vs attnkit: max |Δ| {worst:.1e}", f"NumPy 与 attnkit：最大差 {worst:.1e}"),
                tr(lang, "attention = score, softmax, weighted sum", "注意力 = 打分、softmax、加权求和"))


def render(data: dict, run_dir: Path, lang: str) -> str:
    """The section's prose, figures and check table from a run's numbers ``data``; figures from ``run_dir``."""
    worst = max(max(r["max_out_diff"], r["max_w_diff"]) for r in data["rows"])
    row_err = max(r["row_sum_err"] for r in data["rows"])
    html = "<p>" + tr(
        lang,
        "Attention is <b>dynamic weighting</b>. To build the output at one position, the layer looks at every position it may "
        "read, scores how relevant each one is <em>for this position</em>, turns the scores into weights that sum to 1, and "
        "returns the weighted sum of what those positions carry. Average pooling also returns a weighted sum, but with the "
        "same weights for every position; attention computes new weights for each one (left and right below).",
        "注意力就是<b>动态加权</b>。为了算出某个位置的输出，注意力层查看它能读取的每一个位置，给每个位置打一个“对当前位置有多相关”的分数，"
        "把分数变成和为 1 的权重，再返回这些位置所携带内容的加权和。平均池化也返回加权和，但每个位置用的权重都一样；"
        "注意力则为每个位置重新计算权重（见下图左右两幅）。") + "</p>"
    html += "<p>" + tr(
        lang,
        "Each position plays three roles, through three learned linear maps of its vector: the <b>query</b> q (what this position "
        "is looking for), the <b>key</b> k (what it offers to be matched against) and the <b>value</b> v (what it hands over "
        "when it is chosen). The score of a pair is q·k/√E (E is the vector size; dividing by √E keeps scores from growing with E), "
        "the weights are a softmax over the keys, and the output is the weighted sum of the values.",
        "每个位置通过对自身向量做三个学习得到的线性变换，扮演三种角色：<b>查询</b> q（这个位置在找什么）、<b>键</b> k（它拿什么来被匹配）、"
        "<b>值</b> v（被选中时它交出什么）。一对位置的分数是 q·k/√E（E 是向量长度；除以 √E 使分数不随 E 变大而膨胀），"
        "权重是在所有键上做 softmax，输出是值的加权和。") + "</p>"
    html += figure(run_dir / data["figures"]["dynamic"], tr(lang, "static versus dynamic weighting", "静态加权与动态加权"), lang)
    html += "<p>" + tr(lang, "The three steps, in NumPy, and the same call in attnkit:", "三个步骤的 NumPy 写法，以及 attnkit 中的同一调用：") + "</p>"
    html += f"<pre>{esc(NUMPY_CODE['zh' if lang == 'zh' else 'en'])}</pre>"
    lo, hi = data.get("score_range", (float("nan"), float("nan")))
    html += figure(run_dir / data["figures"]["steps"], tr(lang, "scores and weights", "分数与权重"), lang)
    html += so_what(lang, tr(
        lang,
        f"Scores can be any real number (here from {lo:.2f} to {hi:.2f}); softmax turns each row into shares of 1, so a query's "
        f"output is mostly the value of the key it scores highest: query t2 gives {data['q2_best_w']:.2f} of its weight to key "
        f"t{data['q2_best']}. Everything else on this page (masks, heads, caches, faster kernels) changes how these three steps "
        "are computed or which pairs they may use, not what they are.",
        f"分数可以是任意实数（这里从 {lo:.2f} 到 {hi:.2f}）；softmax 把每一行变成和为 1 的份额，所以一个查询的输出主要是它打分最高的那个键的值："
        f"查询 t2 把 {data['q2_best_w']:.2f} 的权重给了键 t{data['q2_best']}。本页其余内容（掩码、多头、缓存、更快的内核）"
        "改变的是这三步怎样计算、或允许哪些配对参与，而不是这三步本身。"))
    check = "<p>" + tr(
        lang,
        f"Measured now on {data['L']} random tokens of size {data['E']} in float64: NumPy's three steps and "
        f"<code>attnkit.attention</code> agree to {worst:.1e} at most (outputs and weights, {len(data['rows'])} calls), "
        f"and every row of weights sums to 1 within {row_err:.1e}. Δ = attnkit minus NumPy, the largest absolute difference over all entries.",
        f"本次在 {data['L']} 个长度为 {data['E']} 的随机向量上用 float64 测得：NumPy 的三步与 <code>attnkit.attention</code> "
        f"最大差异为 {worst:.1e}（输出和权重，共 {len(data['rows'])} 次调用），每行权重之和与 1 的差不超过 {row_err:.1e}。"
        "Δ = attnkit 减 NumPy，取所有元素中绝对值最大的差。") + "</p>"
    cases = {"plain": "无掩码", "causal": "因果掩码", "padding (4 of 6 keys)": "填充掩码（6 个键中保留 4 个）"}
    check += table([tr(lang, "call", "调用"), tr(lang, "backend auto chose", "auto 选择的后端"), tr(lang, "max |Δ output|", "输出最大差"),
                    tr(lang, "max |Δ weight|", "权重最大差"), tr(lang, "max |row sum − 1|", "行和与 1 的最大差")],
                   [[tr(lang, r["case"], cases.get(r["case"], r["case"])), r["backend"], f"{r['max_out_diff']:.1e}", f"{r['max_w_diff']:.1e}",
                     f"{r['row_sum_err']:.1e}"] for r in data["rows"]])
    html += details(tr(lang, f"Check: NumPy and attnkit agree to {worst:.1e}", f"核对：NumPy 与 attnkit 的差异不超过 {worst:.1e}"), check)
    return html
