"""Plots of benchmark results (:mod:`attnkit.bench`): bars for small suites, heatmaps for the sweep.

The full sweep has 72 (n, dtype, mask, bias) configurations: as bars they are unreadable, so it is
drawn as two grids — rows mask/bias, columns n/dtype — of SDPA time over blockwise time and SDPA
peak memory over blockwise peak memory (log colour, > 1 = blockwise better), each cell also
naming the backend ``auto`` chose.
"""

from __future__ import annotations

import math
from pathlib import Path

from .suites import BACKENDS, BIASES, MASKS


_SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64"}


def plot(result: dict, path: Path) -> None:
    (plot_grid if result.get("suite") == "full" else plot_bars)(result, path)


def plot_bars(result: dict, path: Path) -> None:
    """One bar per (configuration, backend): readable for the quick and must suites."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["rows"] if "median_ms" in r]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    groups: dict[str, dict[str, dict]] = {}
    for r in rows:
        key = f"{r['mask']}/{r['bias']}\n{r['dtype'][:4]} n={r['n']}" + (" f+b" if r["mode"] == "fwdbwd" else "")
        groups.setdefault(key, {})[r["backend"]] = r
    keys = list(groups)
    bes = [b for b in BACKENDS if any(b in g for g in groups.values())]
    w = 0.8 / max(len(bes), 1)
    for j, be in enumerate(bes):
        xs = [i + j * w for i, k in enumerate(keys) if be in groups[k]]
        axes[0].bar(xs, [groups[k][be]["median_ms"] for k in keys if be in groups[k]], w, label=be)
        axes[1].bar(xs, [max(groups[k][be]["peak_mib"], 0.1) for k in keys if be in groups[k]], w, label=be)
    for ax, title in zip(axes, ("median time (ms, log)", "peak memory above inputs (MiB, log, fresh process)")):
        ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xticks([i + 0.4 - w / 2 for i in range(len(keys))], keys, rotation=90, fontsize=6)
        ax.legend(fontsize=7)
    fig.suptitle(f"attnkit attention backends, suite={result['suite']}, B=1 H=8 E=64, torch {result['machine']['torch']}, "
                 f"{result['machine']['cpus']} CPUs")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)




def _grid(rows: list[dict]):
    """{(mask, bias): {(n, dtype): {backend: row}}} and the sorted axes."""
    cells: dict = {}
    for r in rows:
        if "median_ms" in r:
            cells.setdefault((r["mask"], r["bias"]), {}).setdefault((r["n"], r["dtype"]), {})[r["backend"]] = r
    ylab = [(m, b) for m in MASKS for b in BIASES if (m, b) in cells]
    xlab = sorted({k for c in cells.values() for k in c}, key=lambda k: (k[1], k[0]))
    return cells, ylab, xlab


def grid_figure(result: dict, lang: str = "en"):
    """The whole sweep as two grids, one above the other at page width: time and memory ratios
    (SDPA / blockwise), each cell's ratio and ``auto``'s choice in a legible size; titles in ``lang``."""
    import numpy as np

    from ..page.figures import WIDTH_IN, _plt, pick

    plt = _plt()
    t = lambda en, zh: pick(lang, en, zh)  # noqa: E731
    cells, ylab, xlab = _grid(result["rows"])
    fig, axes = plt.subplots(2, 1, figsize=(WIDTH_IN, 2 * (0.42 * len(ylab) + 1.3)), constrained_layout=True)
    for ax, key, title in zip(axes, ("median_ms", "peak_mib"),
                              (t("time: SDPA ÷ blockwise (blue, > 1: blockwise faster)", "时间：SDPA ÷ blockwise（蓝色 > 1：blockwise 更快）"),
                               t("peak memory: SDPA ÷ blockwise (blue, > 1: blockwise smaller)", "峰值内存：SDPA ÷ blockwise（蓝色 > 1：blockwise 更省）"))):
        z = np.full((len(ylab), len(xlab)), np.nan)
        for i, y in enumerate(ylab):
            for j, x in enumerate(xlab):
                c = cells[y].get(x, {})
                if "sdpa" in c and "blockwise" in c:
                    z[i, j] = math.log10(max(c["sdpa"][key], 0.1) / max(c["blockwise"][key], 0.1))
                chose = {"blockwise": "B", "sdpa": "S", "reference": "R"}.get(c.get("auto", {}).get("chosen", ""), "")
                v = 10 ** z[i, j]
                ratio = "–" if np.isnan(z[i, j]) else f"{v:.0f}" if v >= 10 else f"{v:.2g}"
                dark = np.isfinite(z[i, j]) and abs(z[i, j]) > 1.2
                ax.text(j, i, f"{ratio} {chose}", ha="center", va="center", fontsize=9, color="white" if dark else "black")
        lim = np.nanmax(np.abs(z)) if np.isfinite(z).any() else 1.0
        im = ax.imshow(z, cmap="RdBu", vmin=-lim, vmax=lim, aspect="auto")
        ax.set_xticks(range(len(xlab)), [f"{_SHORT.get(d, d)} n={n}" for n, d in xlab], fontsize=9)
        ax.set_yticks(range(len(ylab)), [f"{m}/{b}" for m, b in ylab], fontsize=9)
        ax.set_title(title, fontsize=11)
        bar = fig.colorbar(im, ax=ax, shrink=0.9, pad=0.01)
        ticks = [v for v in (-2, -1, 0, 1, 2) if abs(v) <= lim]
        bar.set_ticks(ticks, labels=[f"{10 ** v:g}×" for v in ticks])
        bar.set_label(t("ratio (log scale)", "比值（对数刻度）"))
    fig.suptitle(t("Each cell: the ratio, then the backend auto chose (B blockwise, S SDPA, R reference); – = SDPA skipped "
                   "(its dense tensors would not fit)",
                   "每格：比值，以及 auto 选择的后端（B = blockwise，S = SDPA，R = reference）；– = SDPA 被跳过（稠密张量放不下）"), fontsize=10)
    return fig


def plot_grid(result: dict, path: Path) -> None:
    """The sweep's grids (:func:`grid_figure`, English) saved to ``path``."""
    from ..page.figures import save

    save(grid_figure(result), path)
