"""Matplotlib figures for the report, sized to be read at 1,000 px: 10 inches at 100 dpi, 11-pt
ticks, a colour bar with its unit on every heatmap, axis labels with units on every plot."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

WIDTH_IN, DPI = 10.0, 100  # 1,000 px wide


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 11, "axes.titlesize": 12, "axes.labelsize": 11})
    return plt


def save(fig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    _plt().close(fig)
    return path


def heatmaps(path, panels: Sequence[tuple[str, object]], *, xlabel: str, ylabel: str, cbar: str,
             vmin: float | None = 0.0, vmax: float | None = 1.0, cmap: str = "Blues", height: float = 3.6) -> Path:
    """One row of heatmaps (title, 2-D array) sharing a colour bar labelled ``cbar``."""
    import numpy as np

    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(WIDTH_IN, height), squeeze=False, constrained_layout=True)
    im = None
    for ax, (title, arr) in zip(axes[0], panels):
        a = np.asarray(arr, dtype=float)
        im = ax.imshow(a, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
    fig.colorbar(im, ax=axes[0].tolist(), label=cbar, shrink=0.9)
    return save(fig, path)
