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


def heatmaps_figure(panels: Sequence[tuple[str, object]], *, xlabel: str, ylabel: str, cbar: str | Sequence[str],
                    vmin: float | None = 0.0, vmax: float | None = 1.0, cmap: str = "Blues", height: float = 3.6):
    """One row of heatmaps (title, 2-D array); returns the matplotlib figure.

    ``cbar`` a string: all panels share one colour scale and one colour bar with that label; a
    ``vmin``/``vmax`` left at ``None`` is taken over all panels together, so the bar covers every
    panel's data and equal colours mean equal values across panels. ``cbar`` a list (one label per
    panel): each panel gets its own colour bar, scaled to its own data where ``vmin``/``vmax`` is
    ``None`` (for panels that show different quantities, e.g. scores and weights)."""
    import numpy as np

    arrays = [np.asarray(arr, dtype=float) for _, arr in panels]
    per_panel = not isinstance(cbar, str)
    if per_panel and len(cbar) != len(panels):
        raise ValueError(f"cbar must be one label or one label per panel ({len(panels)}), got {len(cbar)} labels; "
                         "pass a string to share one colour bar")
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(WIDTH_IN, height), squeeze=False, constrained_layout=True)
    lo = float(min(np.nanmin(a) for a in arrays)) if vmin is None else vmin  # shared range over all panels
    hi = float(max(np.nanmax(a) for a in arrays)) if vmax is None else vmax
    im = None
    for i, (ax, (title, _), a) in enumerate(zip(axes[0], panels, arrays)):
        if per_panel:
            lo = float(np.nanmin(a)) if vmin is None else vmin
            hi = float(np.nanmax(a)) if vmax is None else vmax
        im = ax.imshow(a, cmap=cmap, vmin=lo, vmax=hi, aspect="auto", interpolation="nearest")
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if per_panel:
            fig.colorbar(im, ax=ax, label=cbar[i], shrink=0.9)
    if not per_panel:
        fig.colorbar(im, ax=axes[0].tolist(), label=cbar, shrink=0.9)
    return fig


def heatmaps(path, panels: Sequence[tuple[str, object]], *, xlabel: str, ylabel: str, cbar: str | Sequence[str],
             vmin: float | None = 0.0, vmax: float | None = 1.0, cmap: str = "Blues", height: float = 3.6) -> Path:
    """:func:`heatmaps_figure` saved to ``path``."""
    return save(heatmaps_figure(panels, xlabel=xlabel, ylabel=ylabel, cbar=cbar, vmin=vmin, vmax=vmax, cmap=cmap,
                                height=height), path)
