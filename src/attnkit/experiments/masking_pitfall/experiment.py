"""``masking_pitfall``: hiding keys with ``-1e9`` versus ``-inf`` versus attnkit, per dtype.

A mask says which keys a query may see. The common recipe writes a large negative number into the
hidden scores before the softmax, ``scores.masked_fill(~allowed, -1e9)`` or ``scores + (-1e9)``,
so that ``exp`` of it is 0. Two things go wrong:

* in float16 (largest finite value 65 504) ``-1e9`` does not exist: ``masked_fill`` refuses it, and
  an additive mask rounds it to ``-inf``;
* a *fully masked row* (a query that may see no key: a padding query, an empty window) gets
  ``softmax(-1e9, …, -1e9)`` = uniform weights over the hidden keys, so it silently averages values
  it must not see; with ``-inf`` it gets ``0 / 0`` = NaN, which then spreads through the gradient.

attnkit applies the mask inside the softmax and returns 0 for a fully masked row (the output of
"attend to nothing"). Measured here for float32, float16 and bfloat16, per recipe: the error on
partially masked rows against a float64 oracle that drops the hidden keys, the weight that leaks
onto hidden keys, and the NaNs on fully masked rows. Nothing is trained; well under a second.

Shapes: q (B, H, L, E), k, v (B, H, S, E), allowed (B, 1, L, S), weights (B, H, L, S).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ...core.call import attention
from ...page.figures import save_both
from ...page.html import details, figure, so_what, table
from ...page.i18n import tr
from ..lab.context import RunContext
from ..lab.registry import Experiment, register
from ..lab.results import Section

DTYPES = ("float32", "float16", "bfloat16")
RECIPES = ("fill -1e9", "add -1e9", "fill -inf", "attnkit")


def make_inputs(batch: int, heads: int, length: int, dim: int, seed: int):
    """Random q, k, v and a padding mask: row b keeps its first ``keep[b]`` keys; the last query
    row of every sequence sees no key at all (a fully masked row)."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(batch, heads, length, dim, generator=g, dtype=torch.float64) for _ in range(3))
    keep = torch.randint(1, length, (batch,), generator=g)
    allowed = (torch.arange(length) < keep[:, None]).view(batch, 1, 1, length).expand(batch, 1, length, length).clone()
    allowed[:, :, -1, :] = False  # (B, 1, L, S): the last query may see nothing
    return q, k, v, allowed


def oracle(q, k, v, allowed) -> torch.Tensor:
    """float64 attention over the allowed keys only; 0 for a row with none."""
    s = (q @ k.transpose(-2, -1)) / q.shape[-1] ** 0.5  # (B, H, L, S)
    w = torch.where(allowed, (s - s.amax(-1, keepdim=True)).exp(), torch.zeros((), dtype=s.dtype))
    w = w / w.sum(-1, keepdim=True).clamp_min(1e-300)
    return w @ v


def recipe(name: str, q, k, v, allowed):
    """(out, weights) of one masking recipe in q's dtype; a recipe the dtype refuses raises."""
    if name == "attnkit":
        r = attention(q, k, v, mask=allowed, return_weights=True)
        return r.out, r.weights
    s = (q @ k.transpose(-2, -1)) / q.shape[-1] ** 0.5
    if name == "fill -1e9":
        s = s.masked_fill(~allowed, -1e9)
    elif name == "add -1e9":
        s = s + torch.where(allowed, 0.0, -1e9).to(s.dtype)
    else:
        s = s.masked_fill(~allowed, float("-inf"))
    w = torch.softmax(s.float(), -1).to(q.dtype)  # softmax in float32, as careful code does
    return w @ v, w


def measure(batch: int, heads: int, length: int, dim: int, seed: int) -> list[dict]:
    q, k, v, allowed = make_inputs(batch, heads, length, dim, seed)
    ref = oracle(q, k, v, allowed)
    full = ~allowed.any(-1)  # (B, 1, L): fully masked query rows
    part = ~full
    rows = []
    for dt in DTYPES:
        dtype = getattr(torch, dt)
        eps = torch.finfo(dtype).eps
        for name in RECIPES:
            row = {"dtype": dt, "recipe": name, "eps": eps}
            try:
                out, w = recipe(name, q.to(dtype), k.to(dtype), v.to(dtype), allowed)
            except RuntimeError as e:
                rows.append({**row, "error": str(e).split("\n")[0][:120]})
                continue
            out, w = out.double(), w.double()
            p_err = (out - ref).abs().amax(-1)[part.expand_as(out[..., 0])]
            f_out = out[full.expand_as(out[..., 0])]  # (n_full, E)
            f_w = w[full.expand_as(w[..., 0])]
            row.update({"partial_err_in_eps": float(p_err.nan_to_num(float("inf")).max() / eps),
                        "partial_nan": bool(p_err.isnan().any()),
                        "full_nan": float(f_out.isnan().any(-1).double().mean()),
                        "full_leak": float(f_w.nan_to_num(0).sum(-1).mean()),
                        "full_abs_out": float(f_out.nan_to_num(0).abs().mean())})
            rows.append(row)
    return rows


def outcome(row: dict, lang: str = "en") -> str:
    """One short verdict per (dtype, recipe)."""
    if "error" in row:
        return tr(lang, "refused (overflow)", "报错（溢出）")
    if row["full_nan"] > 0:
        return tr(lang, "NaN on empty rows", "空行为 NaN")
    if row["full_leak"] > 0.5:
        return tr(lang, "empty rows average hidden keys", "空行平均了被遮住的键")
    return tr(lang, "empty rows = 0", "空行 = 0")


@register
class MaskingPitfall(Experiment):
    name = "masking_pitfall"
    help = "the -1e9 masking pitfall: float16/bfloat16 and fully masked rows, against -inf and attnkit"
    quick = {"batch": 8, "heads": 2, "length": 32, "dim": 16}
    full = quick
    tiny = {"batch": 4, "length": 16}
    seeds = 1
    title = ("The −1e9 masking pitfall", "−1e9 掩码陷阱")
    question = ("What goes wrong when masked scores are filled with −1e9, and what should a fully masked row return?",
                "用 −1e9 填充被遮住的分数会出什么问题？一个完全被遮住的行应该返回什么？")
    how_to_read = (
        "Each cell is one way of masking (row) in one number format (column). Green: correct; orange: runs but gives the wrong "
        "answer silently; red: NaN or an error. An empty row is a query that may see no key.",
        "每个格子是一种掩码写法（行）在一种数值格式（列）下的结果。绿色：正确；橙色：能运行但悄悄给出错误结果；红色：NaN 或报错。"
        "空行指一个不能看到任何键的查询。")
    report_order = 45
    lesson = "04_masks"
    est_s = {"quick": 1, "tiny": 1}
    run_in_report = True

    def run(self, ctx: RunContext) -> dict:
        c = ctx.config
        rows = measure(int(c["batch"]), int(c["heads"]), int(c["length"]), int(c["dim"]), ctx.seeds[0])
        if ctx.is_main:
            ctx.save_figure(_figure(rows), "recipes.png")
        return {"rows": rows, "figure": "recipes.png"}

    def report(self, results, out_dir, lang: str = "en", full_results=None) -> Section:
        rows = results["rows"]
        by = {(r["dtype"], r["recipe"]): r for r in rows}
        f16, b16 = by[("float16", "add -1e9")], by[("bfloat16", "fill -1e9")]
        text = tr(lang,
                  "In float16, masked_fill(−1e9) raises an overflow error and an additive −1e9 becomes −inf, so every fully masked row "
                  f"turns into NaN ({100 * f16.get('full_nan', 0):.0f} % of them here). In float32 and bfloat16, −1e9 runs without complaint, "
                  f"but a fully masked row puts {b16.get('full_leak', 0):.2f} of its weight on keys it must not see: it returns the average "
                  "of the hidden values. Filling with −inf gives NaN there instead. attnkit returns 0 for those rows in every dtype, and "
                  "on the rows that do see keys every recipe that runs matches the float64 oracle to within a few rounding units of its dtype.",
                  "在 float16 中，masked_fill(−1e9) 会报溢出错误，而加上 −1e9 会变成 −inf，于是每个完全被遮住的行都变成 NaN"
                  f"（此处为 {100 * f16.get('full_nan', 0):.0f}%）。在 float32 与 bfloat16 中，−1e9 能正常运行，但完全被遮住的行把 "
                  f"{b16.get('full_leak', 0):.2f} 的权重放在它不该看到的键上：输出的是被遮住的值的平均。用 −inf 填充则得到 NaN。"
                  "attnkit 在所有数据类型下对这些行都返回 0；在能看到键的行上，凡是能运行的写法都与 float64 参考结果相差不过几个舍入单位。")
        png = save_both(Path(out_dir) / "figures" / self.name / results["figure"], lambda lg: _figure(rows, lg))[0]
        html = f"<p>{text}</p>" + figure(png, tr(lang, "masking recipes by dtype", "各数据类型下的掩码写法"), lang)
        html += so_what(lang, tr(lang,
                                 "A fully masked row appears whenever a batch is padded (padding queries) or a window is empty. −1e9 hides "
                                 "the bug in float32 by returning a plausible but wrong average, and crashes or NaNs in float16; pass a boolean "
                                 "mask to the attention call instead of writing numbers into the scores, and decide explicitly what an empty row returns.",
                                 "只要批次里有填充（填充位置的查询）或窗口为空，就会出现完全被遮住的行。−1e9 在 float32 下返回一个看似合理但错误的平均值，"
                                 "把问题藏了起来；在 float16 下则报错或产生 NaN。应当把布尔掩码交给注意力调用，而不是往分数里写数字，"
                                 "并明确规定空行返回什么。"))
        body = [[r["dtype"], r["recipe"], outcome(r, lang),
                 "—" if "error" in r else f"{r['partial_err_in_eps']:.1f}",
                 "—" if "error" in r else f"{r['full_leak']:.2f}",
                 "—" if "error" in r else f"{100 * r['full_nan']:.0f} %"] for r in rows]
        html += details(tr(lang, "Per dtype and recipe: errors, leaks and NaNs", "按数据类型与写法：误差、泄漏与 NaN"), table([tr(lang, "dtype", "数据类型"), tr(lang, "recipe", "写法"), tr(lang, "outcome", "结果"),
                       tr(lang, "max error on rows with keys, in units of the dtype's eps", "有键行的最大误差（以该类型 eps 为单位）"),
                       tr(lang, "weight on hidden keys, empty rows", "空行落在被遮键上的权重"), tr(lang, "empty rows that are NaN", "空行中 NaN 的比例")], body))
        return Section(self.heading(lang), html)

    def summary(self, results, lang: str = "en", full_results=None):
        by = {(r["dtype"], r["recipe"]): r for r in results["rows"]}
        leak = by[("float32", "fill -1e9")].get("full_leak", 0)
        return (tr(lang, f"−1e9: empty rows put {leak:.2f} of their weight on hidden keys; float16 overflows",
                   f"−1e9：空行把 {leak:.2f} 的权重放在被遮住的键上；float16 溢出"),
                tr(lang, "pass a boolean mask; empty rows should return 0", "传布尔掩码；空行应返回 0"))


def _figure(rows: list[dict], lang: str = "en"):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    grid = [[0] * len(DTYPES) for _ in RECIPES]
    labels = [[""] * len(DTYPES) for _ in RECIPES]
    for r in rows:
        i, j = RECIPES.index(r["recipe"]), DTYPES.index(r["dtype"])
        bad = "error" in r or r["full_nan"] > 0 or r.get("partial_nan", False)
        grid[i][j] = 2 if bad else (1 if r["full_leak"] > 0.5 else 0)
        labels[i][j] = outcome(r, lang)
    fig, ax = plt.subplots(figsize=(10, 3.6), constrained_layout=True)
    ax.imshow(grid, cmap=ListedColormap(["#9fd89f", "#ffcc80", "#f28b82"]), vmin=0, vmax=2, aspect="auto")
    for i in range(len(RECIPES)):
        for j in range(len(DTYPES)):
            ax.text(j, i, labels[i][j], ha="center", va="center", fontsize=10)
    ax.set_xticks(range(len(DTYPES)), DTYPES)
    ax.set_yticks(range(len(RECIPES)), [tr(lang, "masked_fill(−1e9)", "masked_fill(−1e9)"), tr(lang, "scores + (−1e9)", "分数 + (−1e9)"),
                                        tr(lang, "masked_fill(−inf)", "masked_fill(−inf)"), tr(lang, "attnkit.attention(mask=...)", "attnkit.attention(mask=...)")])
    ax.set_title(tr(lang, "What a fully masked row gets, per masking recipe and dtype", "各掩码写法与数据类型下，完全被遮住的行得到什么"))
    return fig
