"""Matplotlib figures for the report, sized to be read at 1,000 px: 10 inches at 100 dpi, 11-pt
ticks, a colour bar with its unit on every heatmap, axis labels with units on every plot.

Both languages: a figure is drawn once per language by a ``draw(lang) -> figure`` function
(:func:`save_both`); the Chinese copy lands in a ``zh/`` folder beside the English file
(:func:`zh_path`), drawn with a CJK font that matplotlib finds among the system's fonts (Debian's
``fonts-noto-cjk``, see :func:`cjk_font`). Without such a font only the English file is written and
the page shows it with a note (:func:`attnkit.page.html.figure`).
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path
from typing import Callable, Sequence

WIDTH_IN, DPI = 10.0, 100  # 1,000 px wide
CJK_FAMILIES = ("Noto Sans CJK SC", "Noto Sans CJK", "Source Han Sans SC", "WenQuanYi Zen Hei", "Noto Serif CJK SC")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 11, "axes.titlesize": 12, "axes.labelsize": 11})
    return plt


@functools.lru_cache(maxsize=1)
def cjk_font() -> str | None:
    """The family name of a font covering Chinese that matplotlib can use, or None.

    matplotlib's font list is cached on disk the first time it runs; a font installed later
    (``apt-get install fonts-noto-cjk``) is missing from it, so the system's font files whose name
    says CJK are added here when the list has none."""
    from matplotlib import font_manager as fm

    def known() -> list[str]:
        return sorted({f.name for f in fm.fontManager.ttflist if "CJK" in f.name or "WenQuanYi" in f.name or "Han Sans" in f.name})

    if not known():
        for path in fm.findSystemFonts():
            name = Path(path).name
            if "CJK" in name or "wqy" in name.lower() or "SourceHanSans" in name:
                with contextlib.suppress(Exception):  # an unreadable font file is skipped, not fatal
                    fm.fontManager.addfont(path)
    names = known()
    for family in CJK_FAMILIES:
        if family in names:
            return family
    return names[0] if names else None


@contextlib.contextmanager
def language(lang: str):
    """Inside: figures drawn get the font of ``lang`` (Latin text in DejaVu Sans, Chinese in the CJK font)."""
    plt = _plt()
    family = cjk_font() if lang == "zh" else None
    if family is None:
        yield
        return
    with plt.rc_context({"font.family": ["DejaVu Sans", family], "axes.unicode_minus": False}):
        yield


def zh_path(path: str | Path) -> Path:
    """Where the Chinese copy of the figure ``path`` lives: ``zh/`` beside it, same name."""
    path = Path(path)
    return path.parent / "zh" / path.name


def save_both(path: str | Path, draw: Callable[[str], object]) -> list[Path]:
    """Save ``draw("en")`` to ``path`` and, when a CJK font is found, ``draw("zh")`` to
    :func:`zh_path` of it; returns the files written (the English one first)."""
    return draw_both(save, path, draw)


def draw_both(save_fn: Callable[[object, Path], object], path: str | Path, draw: Callable[[str], object]) -> list:
    """:func:`save_both` with another way to save: ``save_fn(figure, path)`` (e.g. an experiment run's
    ``ctx.save_figure``, ``path`` relative to the run's folder); returns what ``save_fn`` returned."""
    written = [save_fn(draw("en"), Path(path))]
    if cjk_font() is not None:
        with language("zh"):
            written.append(save_fn(draw("zh"), zh_path(path)))
    return written


def pick(lang: str, en: str, zh: str) -> str:
    """A figure's text in ``lang``."""
    return zh if lang == "zh" else en


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


def binary_maps_figure(panels: Sequence[tuple[str, object]], *, xlabel: str, ylabel: str, on: str, off: str,
                       height: float = 4.4):
    """One row of yes/no grids (title, 2-D bool array), drawn in two colours with a two-entry legend
    (``on`` for true cells, ``off`` for false ones) instead of a continuous colour bar."""
    import numpy as np
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    plt = _plt()
    on_c, off_c = "#1f4f7a", "#f2f2f2"
    fig, axes = plt.subplots(1, len(panels), figsize=(WIDTH_IN, height), squeeze=False, constrained_layout=True)
    for ax, (title, arr) in zip(axes[0], panels):
        a = np.asarray(arr, dtype=float)
        ax.imshow(a, cmap=ListedColormap([off_c, on_c]), vmin=0, vmax=1, interpolation="nearest")
        ax.set_xticks(range(0, a.shape[1], 2))
        ax.set_yticks(range(0, a.shape[0], 2))
        ax.set_xticks(np.arange(-0.5, a.shape[1], 1), minor=True)
        ax.set_yticks(np.arange(-0.5, a.shape[0], 1), minor=True)
        ax.grid(which="minor", color="#bbbbbb", linewidth=0.5)
        ax.tick_params(which="minor", length=0)
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
    fig.legend(handles=[Patch(facecolor=on_c, label=on), Patch(facecolor=off_c, edgecolor="#999999", label=off)],
               loc="outside lower center", ncols=2, frameon=False)
    return fig
