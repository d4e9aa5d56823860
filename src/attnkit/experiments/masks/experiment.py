"""``masks``: which (query, key) pairs may attend (padding, causal, sliding window), drawn, and what
goes wrong without a mask, measured as a leak: how much an output changes when only tokens it must
not see change.

Measured on random q, k, v (nothing is trained; under a second): the causal leak (change only the
last token; the earlier outputs must not move), the padding leak (change only the padding; the real
outputs must not move) and the attention mass put on padding without a mask, with and without
``attnkit.masks``; and the share of (query, key) pairs a sliding window of 256 keys computes as n grows.

Shape legend: B batch, H heads, L queries, S keys, E feature size.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ... import attention, masks
from ...page.figures import binary_maps_figure, pick, save_both
from ...page.html import details, figure, so_what, table
from ...page.i18n import tr
from ..lab.context import RunContext
from ..lab.registry import Experiment, register
from ..lab.results import Section

L_PIC, REAL, WINDOW = 12, 7, 3  # the figure: a 12-token sequence, 7 of them real, a window of 3 keys


def _leak(q, k, v, k2, v2, mask, rows) -> float:
    """max |out(k, v) − out(k2, v2)| over the query ``rows``: what changing hidden keys leaks."""
    a = attention(q, k, v, mask=mask).out[..., rows, :]
    b = attention(q, k2, v2, mask=mask).out[..., rows, :]
    return float((a - b).abs().max())


def measure(L: int, E: int, seed: int, window: int, lengths: list[int]) -> dict:
    """The causal and padding leaks, with and without the mask, on L random tokens of size E (2
    heads); and the share of pairs a causal sliding window of ``window`` keys keeps per length n."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 2, L, E, generator=g) for _ in range(3))  # (B, H, L, E)
    # causal: change only the last token; every earlier position must be unaffected
    k2, v2 = k.clone(), v.clone()
    k2[..., -1, :] += 3 * torch.randn(E, generator=g)
    v2[..., -1, :] += 3 * torch.randn(E, generator=g)
    early = slice(0, L - 1)
    causal = {"without": _leak(q, k, v, k2, v2, None, early), "with": _leak(q, k, v, k2, v2, masks.causal(), early)}
    # padding: a sequence of `real` tokens padded to L; change only the padding's content
    real = L // 3
    k3, v3 = k.clone(), v.clone()
    k3[..., real:, :] = torch.randn(1, 2, L - real, E, generator=g)
    v3[..., real:, :] = torch.randn(1, 2, L - real, E, generator=g)
    pm = masks.padding_mask([real], L)
    rows = slice(0, real)
    w = attention(q, k, v, return_weights=True).weights[..., rows, :]  # (B, H, real, S)
    padding = {"without": _leak(q, k, v, k3, v3, None, rows), "with": _leak(q, k, v, k3, v3, pm, rows),
               "mass_on_padding": float(w[..., real:].sum(-1).mean()), "real": real}
    # sliding window: the share of pairs that are computed at all, as n grows
    share = {n: float(masks.sliding_window(left=window - 1, right=0).materialize(n, n).float().mean()) for n in lengths}
    return {"L": L, "causal": causal, "padding": padding, "window": window, "window_share": share}


@register
class Masks(Experiment):
    name = "masks"
    help = "padding, causal and sliding-window masks drawn; the leak without them measured; the pairs a window keeps"
    quick = {"length": 64, "dim": 16, "window": 256, "window_lengths": [512, 1024, 2048]}
    full = quick
    tiny = {"length": 16, "dim": 8}
    seeds = 1
    title = ("Masks: padding, causal, sliding window", "掩码：填充、因果、滑动窗口")
    question = ("Which (query, key) pairs may attend, and what goes wrong without a mask?", "哪些 (查询, 键) 对可以相互关注？没有掩码会出什么错？")
    how_to_read = ("Dark cells may attend, light cells are masked (their weight is exactly 0). Rows are queries, columns keys.",
                   "深色格子可以关注，浅色格子被掩码（权重恰好为 0）。行是查询，列是键。")
    report_order = 40  # after self-attention on real text (30)
    lesson = "04_masks"
    est_s = {"quick": 3, "tiny": 1}
    run_in_report = True

    def run(self, ctx: RunContext) -> dict:
        c = ctx.config
        data = measure(int(c["length"]), int(c["dim"]), ctx.seeds[0], int(c["window"]), [int(n) for n in c["window_lengths"]])
        if ctx.is_main:
            save_both(ctx.out / "masks.png", masks_figure)
        return {**data, "figure": "masks.png"}

    def report(self, results, out_dir, lang: str = "en", full_results=None) -> Section:
        return Section(self.heading(lang), render(results, Path(results.run_dir), lang))

    def summary(self, results, lang: str = "en", full_results=None):
        return (tr(lang, f"future leak without/with causal mask: {results['causal']['without']:.2f} / {results['causal']['with']:.0e}",
                   f"无/有因果掩码时的泄漏：{results['causal']['without']:.2f} / {results['causal']['with']:.0e}"),
                tr(lang, "masks decide who may see whom; without them outputs leak", "掩码决定谁能看到谁；没有掩码就会泄漏"))


def masks_figure(lang: str = "en"):
    """Padding, causal and sliding-window masks on a 12-token sequence, as allowed / masked cells."""
    t = lambda en, zh: pick(lang, en, zh)  # noqa: E731
    pics = [(t(f"padding: {REAL} real tokens of {L_PIC}", f"填充：{L_PIC} 个中 {REAL} 个真实 token"), masks.padding_mask([REAL], L_PIC)),
            (t("causal", "因果"), masks.causal()),
            (t(f"sliding window ({WINDOW} keys, causal)", f"滑动窗口（{WINDOW} 个键，因果）"), masks.sliding_window(left=WINDOW - 1, right=0))]
    return binary_maps_figure([(title, m.materialize(L_PIC, L_PIC)[0, 0].numpy()) for title, m in pics],
                              xlabel=t("key position", "键的位置"), ylabel=t("query position", "查询的位置"),
                              on=t("may attend", "可以关注"), off=t("masked: weight exactly 0", "被掩码：权重恰好为 0"))


def render(data: dict, run_dir: Path, lang: str) -> str:
    """The section's figure, prose and folded window table from a run's numbers ``data``."""
    c, p, L = data["causal"], data["padding"], data["L"]
    html = figure(run_dir / data["figure"], tr(lang, "masks", "掩码"), lang)
    html += "<p>" + tr(
        lang,
        f"Measured now (L = {L}, 2 heads, random q, k, v). <b>Causal</b>: changing only the last token moved the outputs "
        f"of the {L - 1} earlier positions by up to {c['without']:.3f} without a mask — the future leaked into the past — "
        f"and by {c['with']:.1e} with <code>masks.causal()</code>. <b>Padding</b>: a sequence of {p['real']} real tokens "
        f"padded to {L} put {100 * p['mass_on_padding']:.0f} % of its attention on padding without a mask, so changing the "
        f"padding's content moved real outputs by up to {p['without']:.3f}; with <code>masks.padding_mask</code> by {p['with']:.1e}.",
        f"本次实测（L = {L}，2 个头，随机 q、k、v）。<b>因果掩码</b>：只改变最后一个 token，没有掩码时前面 {L - 1} 个位置的输出"
        f"最多变化 {c['without']:.3f}——未来信息泄漏到了过去；使用 <code>masks.causal()</code> 时变化为 {c['with']:.1e}。"
        f"<b>填充掩码</b>：{p['real']} 个真实 token 填充到 {L} 时，没有掩码会把 {100 * p['mass_on_padding']:.0f}% 的注意力放在填充位上，"
        f"改变填充内容会使真实位置的输出最多变化 {p['without']:.3f}；使用 <code>masks.padding_mask</code> 时为 {p['with']:.1e}。",
    ) + "</p>"
    html += so_what(lang, tr(
        lang,
        "A mask is not a detail of efficiency: it decides what a position is allowed to know. A decoder trained without the causal "
        "mask can read the answer it is asked to predict, and a padded batch without the padding mask mixes filler into real "
        "outputs; with the mask both leaks drop to rounding error.",
        "掩码不是效率上的细节：它决定了一个位置被允许知道什么。没有因果掩码训练的解码器可以直接读到它要预测的答案；"
        "没有填充掩码的批次会把填充内容混进真实输出；加上掩码后，两种泄漏都降到舍入误差的量级。"))
    share = table([tr(lang, "sequence length n", "序列长度 n"), tr(lang, f"share of (query, key) pairs computed, window {data['window']}", f"窗口 {data['window']} 时需要计算的 (查询, 键) 对比例")],
                  [[n, f"{100 * s:.1f} %"] for n, s in data["window_share"].items()])
    share += "<p>" + tr(lang, "A sliding window keeps cost linear in n: the share of pairs it keeps roughly halves each time n doubles; "
                              "a backend that skips masked tiles (blockwise) turns that into time and memory saved.",
                        "滑动窗口让计算量随 n 线性增长：n 每翻一倍，保留的配对比例大约减半；跳过被掩码块的后端（blockwise）会把它变成节省的时间和内存。") + "</p>"
    return html + details(tr(lang, "Sliding windows: the share of pairs computed as n grows", "滑动窗口：随 n 增长需要计算的配对比例"), share)
