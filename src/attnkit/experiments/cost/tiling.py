"""The online softmax of Flash attention, tile by tile, for one query row: the picture of how the
blockwise backend avoids the n × n matrix (Milakov & Gimelshein 2018, arXiv:1805.02867; Dao et al.
2022, arXiv:2205.14135).

For scores s_1..s_S read in tiles, keep a running max m, a running sum l = Σ exp(s_j − m) and a
running output o = Σ exp(s_j − m) v_j. A new tile with max m_t rescales what came before:

    m' = max(m, m_t);   l' = l·exp(m − m') + Σ_tile exp(s_j − m');   o' = o·exp(m − m') + Σ_tile exp(s_j − m') v_j

and after the last tile o / l is exactly softmax(s)·V. :func:`trace` computes that recurrence in
float64 with plain torch and checks it against ``attnkit.attention(backend="blockwise")`` on the same
row; :func:`tiling_figure` draws the scores with the tiles, and m and l after each tile next to the
exact max and sum.

Shapes: q (1, 1, 1, E), k and v (1, 1, S, E); scores (S,).
"""

from __future__ import annotations

import math

import torch

from ...page.figures import pick


def trace(S: int = 256, tile: int = 64, E: int = 16, seed: int = 0) -> dict:
    """Running max and sum after each tile of one query row, the exact ones, and the largest difference
    between the recurrence's output, exact softmax attention and attnkit's blockwise backend."""
    from ... import attention

    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 1, n, E, generator=g, dtype=torch.float64) for n in (1, S, S))
    s = (q[0, 0, 0] @ k[0, 0].T) / math.sqrt(E)  # (S,)
    m, l, o = -math.inf, 0.0, torch.zeros(E, dtype=torch.float64)
    steps = []
    for start in range(0, S, tile):
        st = s[start:start + tile]
        m_new = max(m, float(st.max()))
        scale = math.exp(m - m_new) if m > -math.inf else 0.0  # rescale what the earlier tiles summed
        p = torch.exp(st - m_new)
        l = l * scale + float(p.sum())
        o = o * scale + p @ v[0, 0, start:start + tile]
        m = m_new
        steps.append({"end": start + len(st), "max": m, "sum": l})
    exact = torch.softmax(s, -1) @ v[0, 0]
    blockwise = attention(q, k, v, backend="blockwise").out[0, 0, 0]
    return {"scores": s.tolist(), "tile": tile, "steps": steps, "exact_max": float(s.max()),
            "exact_sum": float(torch.exp(s - s.max()).sum()), "error_vs_exact": float((o / l - exact).abs().max()),
            "error_vs_blockwise": float((o / l - blockwise).abs().max())}


def tiling_figure(tr_: dict, lang: str = "en"):
    """Left: one row's scores with its tiles shaded; right: running max and sum after each tile against the exact ones."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = lambda en, zh: pick(lang, en, zh)  # noqa: E731
    s, tile, steps = tr_["scores"], tr_["tile"], tr_["steps"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8), constrained_layout=True)
    for i, start in enumerate(range(0, len(s), tile)):
        a.axvspan(start - 0.5, start + tile - 0.5, color="#1f77b4" if i % 2 else "#ff7f0e", alpha=0.12)
        a.text(start + tile / 2, max(s), t(f"tile {i + 1}", f"第 {i + 1} 块"), ha="center", va="bottom", fontsize=9)
    a.plot(range(len(s)), s, color="#333333", lw=1)
    a.set_xlabel(t("key position j", "键的位置 j"))
    a.set_ylabel(t("score q·k_j / √E", "分数 q·k_j / √E"))
    a.set_title(t("One query's scores, read one tile at a time", "一个查询的分数，每次读一块"))
    x = [st["end"] for st in steps]
    b.plot(x, [st["max"] for st in steps], "o-", color="#d62728", label=t("running max m", "运行最大值 m"))
    b.axhline(tr_["exact_max"], color="#d62728", ls=":", label=t("exact max", "精确最大值"))
    b2 = b.twinx()
    b2.plot(x, [st["sum"] for st in steps], "s-", color="#2ca02c", label=t("running sum l = Σ exp(s − m)", "运行和 l = Σ exp(s − m)"))
    b2.axhline(tr_["exact_sum"], color="#2ca02c", ls=":", label=t("exact sum", "精确和"))
    b.set_xlabel(t("keys read so far", "已读的键数"))
    b.set_ylabel(t("running max", "运行最大值"))
    b2.set_ylabel(t("running sum (rescaled at each new max)", "运行和（每遇到新最大值就重新缩放）"))
    b.set_title(t("After the last tile both equal the exact values", "读完最后一块时两者都等于精确值"))
    lines = b.get_legend_handles_labels()[0] + b2.get_legend_handles_labels()[0]
    labels = b.get_legend_handles_labels()[1] + b2.get_legend_handles_labels()[1]
    b.legend(lines, labels, fontsize=8, loc="center right")
    b.grid(alpha=0.3)
    return fig
