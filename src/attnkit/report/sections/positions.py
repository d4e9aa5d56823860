"""Report section: relative positions — attention alone cannot see order, and what ALiBi and RoPE add.

Measured now: (1) without positions, shuffling the tokens shuffles the outputs the same way
(attention is permutation-equivariant: order is invisible); with ALiBi it does not; (2) with RoPE
the score of a (query, key) pair depends only on their offset: shifting both positions changes it
by rounding error only. Pictures: ALiBi's bias for a steep and a shallow head.

Shape legend: B batch, H heads, L queries, S keys, E feature size.
"""

from __future__ import annotations

import torch

from ... import RotaryEmbedding, attention, biases
from ...page.figures import heatmaps_figure, pick, save_both
from ...page.html import details, figure, so_what, table
from ...page.i18n import tr
from ...page.story import SectionContext, StorySection


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


def compute(ctx: SectionContext) -> dict:
    g = torch.Generator().manual_seed(0)
    L, E, H = 16, 16, 8
    x = torch.randn(1, H, L, E, generator=g)
    perm = torch.randperm(L, generator=g)
    equiv = {}
    for name, bias in (("none", None), ("ALiBi", biases.ALiBi(H))):
        out = attention(x, x, x, bias=bias).out
        out_p = attention(x[:, :, perm], x[:, :, perm], x[:, :, perm], bias=bias).out
        equiv[name] = float((out[:, :, perm] - out_p).abs().max())  # 0: the shuffle only reorders outputs
    rope = RotaryEmbedding(E, max_positions=4096)
    q, k = torch.randn(1, 1, 1, E, generator=g), torch.randn(1, 1, 1, E, generator=g)
    shifts = [0, 10, 100, 1000]
    scores = []
    for s in shifts:  # query at position 5 + s, key at 2 + s: the same offset 3
        qr, kr = rope.rotate_qk(q, k, torch.tensor([5 + s]))[0], rope.rotate_qk(q, k, torch.tensor([2 + s]))[1]
        scores.append(float((qr * kr).sum()))
    d = ctx.dir("positions")
    files = save_both(d / "alibi.png", lambda lang: alibi_figure(H, L, lang))
    return {"equiv": equiv, "rope_shifts": shifts, "rope_scores": scores, "png": ctx.rel(files[0]), "_files": [ctx.rel(f) for f in files]}


def render(data: dict, ctx: SectionContext, lang: str) -> str:
    e, sc = data["equiv"], data["rope_scores"]
    spread = max(sc) - min(sc)
    html = figure(ctx.out / data["png"], tr(lang, "ALiBi bias", "ALiBi 偏置"), lang)
    html += "<p>" + tr(
        lang,
        f"Measured now on 16 random tokens: without any position information, shuffling the input reorders the output "
        f"and changes nothing else (max difference {e['none']:.1e}) — attention by itself does not know the order. "
        f"With ALiBi the same shuffle changes the outputs by up to {e['ALiBi']:.2f}: the bias depends on the distance i − j. "
        f"With RoPE the score of a query and a key 3 positions apart is {sc[0]:.4f} at positions (5, 2) and stays within "
        f"{spread:.1e} when both are shifted by up to {data['rope_shifts'][-1]:,}: it depends only on the offset.",
        f"本次在 16 个随机 token 上实测：没有任何位置信息时，打乱输入只会同样地打乱输出，其他都不变（最大差 {e['none']:.1e}）——"
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


def summary(data: dict, ctx: SectionContext, lang: str):
    return (tr(lang, f"shuffle changes output: no positions {data['equiv']['none']:.0e}, ALiBi {data['equiv']['ALiBi']:.2f}",
               f"打乱后输出变化：无位置 {data['equiv']['none']:.0e}，ALiBi {data['equiv']['ALiBi']:.2f}"),
            tr(lang, "attention needs positions; relative ones depend only on i − j", "注意力需要位置信息；相对位置只取决于 i − j"))


ORDER = 60  # its place in the report: after cost (50)


def section() -> StorySection:
    """This part of the report, with the question it answers and how to read its figure."""
    return StorySection(
        "positions", ("Relative positions", "相对位置"),
        ("Does attention know word order, and how do relative position methods (ALiBi, RoPE) add it?",
         "注意力知道词序吗？相对位置方法（ALiBi、RoPE）如何加入位置信息？"),
        ("The heatmaps are ALiBi's bias added to each score: 0 on the diagonal, more negative the further the key is; a steep "
         "head (left) only sees nearby tokens, a shallow one (right) far ones too. Both share one colour scale, so the shallow "
         "head's small bias looks nearly flat.",
         "热力图是 ALiBi 加到每个分数上的偏置：对角线为 0，键越远越负；陡峭的头（左）只看附近的 token，平缓的头（右）也能看到远处。"
         "两幅图共用一个颜色刻度，所以平缓头的偏置很小，看起来几乎是平的。"),
        compute, render, (__name__,), est_s={"quick": 2, "tiny": 1}, summary=summary, order=ORDER,
        lesson="08_relative_position")
