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


def plot_grid(result: dict, path: Path) -> None:
    """Heatmaps of SDPA/blockwise time and memory ratios over the whole sweep."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    cells, ylab, xlab = _grid(result["rows"])
    fig, axes = plt.subplots(1, 2, figsize=(15, 0.45 * len(ylab) + 2.5))
    for ax, key, title in zip(axes, ("median_ms", "peak_mib"),
                              ("time: SDPA / blockwise (> 1: blockwise faster)", "peak memory: SDPA / blockwise")):
        z = np.full((len(ylab), len(xlab)), np.nan)
        for i, y in enumerate(ylab):
            for j, x in enumerate(xlab):
                c = cells[y].get(x, {})
                if "sdpa" in c and "blockwise" in c:
                    z[i, j] = math.log10(max(c["sdpa"][key], 0.1) / max(c["blockwise"][key], 0.1))
                choice = c.get("auto", {}).get("chosen", "")
                ratio = "–" if np.isnan(z[i, j]) else f"{10 ** z[i, j]:.2g}"
                ax.text(j, i, f"{ratio}\n{choice[:5]}", ha="center", va="center", fontsize=6)
        lim = np.nanmax(np.abs(z)) if np.isfinite(z).any() else 1.0
        im = ax.imshow(z, cmap="RdBu", vmin=-lim, vmax=lim, aspect="auto")
        ax.set_xticks(range(len(xlab)), [f"{_SHORT.get(d, d)}\nn={n}" for n, d in xlab], fontsize=7)
        ax.set_yticks(range(len(ylab)), [f"{m}/{b}" for m, b in ylab], fontsize=7)
        ax.set_title(title, fontsize=9)
        fig.colorbar(im, ax=ax, label="log10 ratio", shrink=0.8)
    fig.suptitle(f"attnkit full sweep (cell: ratio, and the backend auto chose; – = SDPA skipped, dense tensors too large), "
                 f"B=1 H=8 E=64, torch {result['machine']['torch']}, {result['machine']['cpus']} CPUs", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
