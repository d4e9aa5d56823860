"""``positions``: attention alone cannot see word order, and what relative positions (ALiBi,
https://arxiv.org/abs/2108.12409; RoPE, https://arxiv.org/abs/2104.09864) add.

Measured on random tokens (nothing is trained; under a second): (1) without positions, shuffling
the tokens shuffles the outputs the same way (attention is permutation-equivariant: order is
invisible); with ALiBi it does not; (2) with RoPE the score of a (query, key) pair depends only on
their offset: shifting both positions changes it by rounding error only. Drawn: ALiBi's bias for a
steep and a shallow head.

Shape legend: B batch, H heads, L queries, S keys, E feature size.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ... import RotaryEmbedding, attention, biases
from ...page.figures import heatmaps_figure, pick, save_both
from ...page.html import details, figure, so_what, table
from ...page.i18n import tr
from ..lab.context import RunContext
from ..lab.registry import Experiment, register
from ..lab.results import Section


def alibi_figure(H: int, L: int, lang: str = "en"):
    """ALiBi's bias (L, L) for the steepest head (0) and the shallowest (H − 1) on one shared colour
    scale, so the steep head's fast fall-off and the shallow head's near-flat bias look different."""
    bm = biases.ALiBi(H).materialize(L, L)[0]  # (H, L, L)
    slopes = biases.alibi_slopes(H)
    t = lambda en, zh: pick(lang, en, zh)  # noqa: E731
    return heatmaps_figure([(t(f"ALiBi head 0 (slope {float(slopes[0]):.3f})", f"ALiBi 第 0 个头（斜率 {float(slopes[0]):.3f}）"), bm[0].numpy()),
                            (t(f"ALiBi head {H - 1} (slope {float(slopes[-1]):.4f})", f"ALiBi 第 {H - 1} 个头（斜率 {float(slopes[-1]):.4f}）"),
                             bm[H - 1].numpy())],
                           xlabel=t("key position j", "键的位置 j"), ylabel=t("query position i", "查询的位置 i"),
                           cbar=t("bias −slope·|i−j| (one scale, both heads)", "偏置 −斜率·|i−j|（两个头共用一个刻度）"),
                           vmin=None, vmax=0.0, cmap="viridis")


def rope_curve(q: torch.Tensor, k: torch.Tensor, offsets: list[int], shift: int) -> list[float]:
    """RoPE's score of query q (1, 1, 1, E) at position 2000 + shift and key k at 2000 + shift − offset, per offset."""
    rope = RotaryEmbedding(q.shape[-1], max_positions=8192)
    base = 2000 + shift
    return [float((rope.rotate_qk(q, k, torch.tensor([base]))[0] * rope.rotate_qk(q, k, torch.tensor([base - o]))[1]).sum())
            for o in offsets]


def positions_figure(H: int, data: dict, lang: str = "en"):
    """Left: ALiBi's bias against the distance i − j, one line per head (steep to shallow, none an empty
    square); right: RoPE's score of one random (query, key) pair against their offset, measured at two
    absolute positions 1,000 apart: the two curves lie on each other, the score depends on the offset only."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = lambda en, zh: pick(lang, en, zh)  # noqa: E731
    slopes = biases.alibi_slopes(H)
    d = list(range(0, 33))
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8), constrained_layout=True)
    cmap = plt.get_cmap("viridis")
    for h in range(H):
        a.plot(d, [-float(slopes[h]) * x for x in d], color=cmap(h / max(1, H - 1)), label=t(f"head {h}", f"第 {h} 个头") if h in (0, H - 1) else None)
    a.set_xlabel(t("distance i − j (tokens)", "距离 i − j（token）"))
    a.set_ylabel(t("bias added to the score", "加到分数上的偏置"))
    a.set_title(t(f"ALiBi: −slope·|i − j|, {H} heads", f"ALiBi：−斜率·|i − j|，{H} 个头"))
    a.legend()
    a.grid(alpha=0.3)
    rc = data["rope_curve"]
    b.plot(rc["offsets"], rc["scores"][0], color="#1f77b4", lw=2.5, label=t(f"query at position {2000 + rc['shifts'][0]}", f"查询位于 {2000 + rc['shifts'][0]}"))
    b.plot(rc["offsets"], rc["scores"][1], color="#ff7f0e", ls="--", label=t(f"query at position {2000 + rc['shifts'][1]}", f"查询位于 {2000 + rc['shifts'][1]}"))
    b.set_xlabel(t("offset i − j (query minus key position)", "偏移 i − j（查询位置减键位置）"))
    b.set_ylabel(t("score q·k after rotation", "旋转后的分数 q·k"))
    b.set_title(t("RoPE: one query–key pair, two absolute positions", "RoPE：同一对查询和键，两个绝对位置"))
    b.legend()
    b.grid(alpha=0.3)
    return fig


def shuffle_change(x: torch.Tensor, perm: torch.Tensor, bias=None) -> float:
    """Largest |attention(x)[perm] − attention(x[perm])| of self-attention on x (B, H, L, E) with
    ``bias``: 0 when a shuffle of the tokens only reorders the outputs (order is invisible)."""
    out = attention(x, x, x, bias=bias).out  # (B, H, L, E)
    out_p = attention(x[:, :, perm], x[:, :, perm], x[:, :, perm], bias=bias).out
    return float((out[:, :, perm] - out_p).abs().max())


def rope_offset_scores(q: torch.Tensor, k: torch.Tensor, shifts: list[int]) -> list[float]:
    """RoPE's score of query q (1, 1, 1, E) at position 5 + s and key k at 2 + s (the same offset 3), per shift s."""
    rope = RotaryEmbedding(q.shape[-1], max_positions=4096)
    scores = []
    for s in shifts:
        qr, kr = rope.rotate_qk(q, k, torch.tensor([5 + s]))[0], rope.rotate_qk(q, k, torch.tensor([2 + s]))[1]
        scores.append(float((qr * kr).sum()))
    return scores


def measure(L: int, E: int, H: int, shifts: list[int], seed: int) -> dict:
    """The largest output change under a shuffle of L random tokens (size E, H heads), without
    positions and with ALiBi; RoPE's score of a random query and key 3 positions apart, per shift."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, H, L, E, generator=g)  # (B, H, L, E)
    perm = torch.randperm(L, generator=g)
    equiv = {name: shuffle_change(x, perm, bias) for name, bias in (("none", None), ("ALiBi", biases.ALiBi(H)))}
    q, k = torch.randn(1, 1, 1, E, generator=g), torch.randn(1, 1, 1, E, generator=g)
    offsets = list(range(-32, 33))
    curve = {"offsets": offsets, "shifts": [0, 1000], "scores": [rope_curve(q, k, offsets, s) for s in (0, 1000)]}
    return {"equiv": equiv, "rope_shifts": list(shifts), "rope_scores": rope_offset_scores(q, k, shifts), "rope_curve": curve}


@register
class Positions(Experiment):
    name = "positions"
    help = "attention alone cannot see word order (a shuffle only reorders outputs); what ALiBi and RoPE add, measured"
    quick = {"length": 16, "dim": 16, "heads": 8, "shifts": [0, 10, 100, 1000]}
    full = quick
    tiny = {}  # already a second
    seeds = 1
    title = ("Relative positions", "相对位置")
    question = ("Does attention know word order, and how do relative position methods (ALiBi, RoPE) add it?",
                "注意力知道词序吗？相对位置方法（ALiBi、RoPE）如何加入位置信息？")
    how_to_read = (
        "Left: ALiBi's bias added to each score against the distance between query and key, one line per head: a steep head "
        "(purple, head 0) all but stops seeing tokens a few positions away, a shallow one (yellow) still sees far ones. "
        "Right: RoPE's score for one query and one key against their offset, measured with the query at two absolute positions "
        "1,000 apart; the two curves coincide, because the rotation leaves only the offset in the score.",
        "左图：ALiBi 加到每个分数上的偏置随查询与键之间距离的变化，每个头一条线：陡峭的头（紫色，第 0 个头）在几个位置之外就几乎看不到了，平缓的头（黄色）仍能看到远处。"
        "右图：同一个查询和同一个键的 RoPE 分数随二者偏移的变化，查询放在相隔 1,000 的两个绝对位置上分别测量；两条曲线重合，"
        "因为旋转之后分数中只剩下偏移。")
    report_order = 60  # after cost (50)
    lesson = "08_relative_position"
    est_s = {"quick": 2, "tiny": 1}
    run_in_report = True

    def run(self, ctx: RunContext) -> dict:
        c = ctx.config
        L, H = int(c["length"]), int(c["heads"])
        data = measure(L, int(c["dim"]), H, [int(s) for s in c["shifts"]], ctx.seeds[0])
        if ctx.is_main:
            save_both(ctx.out / "positions.png", lambda lang: positions_figure(H, data, lang))
        return {**data, "length": L, "figure": "positions.png"}

    def report(self, results, out_dir, lang: str = "en", full_results=None) -> Section:
        return Section(self.heading(lang), render(results, Path(results.run_dir), lang))

    def summary(self, results, lang: str = "en", full_results=None):
        e = results["equiv"]
        return (tr(lang, f"shuffle changes output: no positions {e['none']:.0e}, ALiBi {e['ALiBi']:.2f}",
                   f"打乱后输出变化：无位置 {e['none']:.0e}，ALiBi {e['ALiBi']:.2f}"),
                tr(lang, "attention needs positions; relative ones depend only on i − j", "注意力需要位置信息；相对位置只取决于 i − j"))


def render(data: dict, run_dir: Path, lang: str) -> str:
    """The section's figure, prose and folded RoPE table from a run's numbers ``data``."""
    e, sc = data["equiv"], data["rope_scores"]
    spread = max(sc) - min(sc)
    html = figure(run_dir / data["figure"], tr(lang, "ALiBi bias by distance; RoPE score by offset", "ALiBi 偏置随距离；RoPE 分数随偏移"), lang)
    html += "<p>" + tr(
        lang,
        f"Measured now on {data['length']} random tokens: without any position information, shuffling the input reorders the output "
        f"and changes nothing else (max difference {e['none']:.1e}) — attention by itself does not know the order. "
        f"With ALiBi the same shuffle changes the outputs by up to {e['ALiBi']:.2f}: the bias depends on the distance i − j. "
        f"With RoPE the score of a query and a key 3 positions apart is {sc[0]:.4f} at positions (5, 2) and stays within "
        f"{spread:.1e} when both are shifted by up to {data['rope_shifts'][-1]:,}: it depends only on the offset.",
        f"本次在 {data['length']} 个随机 token 上实测：没有任何位置信息时，打乱输入只会同样地打乱输出，其他都不变（最大差 {e['none']:.1e}）——"
        f"注意力本身不知道顺序。加上 ALiBi 后，同样的打乱使输出最多变化 {e['ALiBi']:.2f}：偏置取决于距离 i − j。"
        f"使用 RoPE 时，相距 3 个位置的查询和键在位置 (5, 2) 的分数为 {sc[0]:.4f}，两者一起平移最多 {data['rope_shifts'][-1]:,} 个位置，"
        f"分数变化不超过 {spread:.1e}：它只取决于相对偏移。",
    ) + "</p>"
    html += so_what(lang, tr(
        lang,
        "Attention treats its input as a set: without position information a sentence and its shuffle look the same to it. "
        "Relative schemes add order as a function of the distance between two tokens only, which is what lets a model "
        "trained on short texts behave the same wherever a phrase sits in a longer one.",
        "注意力把输入当作一个集合：没有位置信息时，一句话和它打乱后的版本在注意力看来是一样的。"
        "相对位置方法只根据两个 token 之间的距离加入顺序信息，这使得在短文本上训练的模型，无论一个短语出现在长文本的哪里，表现都一样。"))
    rope = table([tr(lang, "shift s", "平移 s"), tr(lang, "RoPE score of positions (5+s, 2+s)", "位置 (5+s, 2+s) 的 RoPE 分数")],
                 [[s, f"{v:.6f}"] for s, v in zip(data["rope_shifts"], sc)])
    return html + details(tr(lang, "RoPE scores under a shift, one by one", "平移后的 RoPE 分数，逐一列出"), rope)
