"""Static matplotlib figures of attention weights: one head, a layer x head grid,
head diagnostics, and attention over a 2-D patch grid.

In the style of Clark et al. 2019, "What Does BERT Look At?",
https://arxiv.org/abs/1906.04341 (per-head heatmaps) and Dosovitskiy et al. 2020 (ViT),
https://arxiv.org/abs/2010.11929 (attention over image patches). Attention maps show
where the softmax put its mass, not why the model decided anything.

matplotlib is optional (``pip install attnkit[viz]``) and imported only when a plot is
made. Figures are built on matplotlib's Agg canvas directly, without pyplot, so the
global backend and pyplot's figure list are left alone: nothing leaks, and no display is
needed. Every function returns the ``matplotlib.figure.Figure`` and, given ``path``,
also writes a PNG there (parent folders created). A keyword-only ``lang`` ("en", the default, or
"zh") sets the language of the words the figure prints (:mod:`attnkit.inspect.figure_text`).

Shape legend:
    H: heads    L: queries    S: keys    h, w: patch grid rows and columns
    one head: (L, S); one layer for one sequence: (H, L, S); per-layer (B, H, L, S) with ``index``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from attnkit.inspect.figure_text import in_language, label_name, metric_name, word
from attnkit.inspect.layer_list import as_layer_list

__all__ = ["plot_head", "plot_heads_grid", "plot_diagnostics", "plot_patch_map"]

_INSTALL_HINT = "attnkit.inspect.plots needs matplotlib; install it with: pip install attnkit[viz]"
#: Above this many tokens, tick labels are thinned so they stay readable.
MAX_TICK_LABELS = 60
#: One-letter codes drawn in diagnostics cells, per head label.
LABEL_CODES = {
    "dead": "D",
    "uniform": "U",
    "positional-previous": "P",
    "positional-next": "N",
    "positional-self": "S",
    "content": "C",
}


def _figure(width: float, height: float):
    """A Figure on an Agg canvas (no pyplot, no global backend change)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(_INSTALL_HINT) from exc
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _finish(fig, path, dpi: int):
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format="png", dpi=dpi)
    return fig


def _array(x, name: str, ndims: tuple[int, ...], legend: str) -> np.ndarray:
    """Tensor / array-like -> float64 numpy, checking ndim."""
    if isinstance(x, Tensor):
        x = x.detach().to("cpu", torch.float64).numpy()
    else:
        try:
            x = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be a tensor or array of numbers with shape {legend}") from None
    if x.ndim not in ndims:
        raise ValueError(f"{name} must have shape {legend}; got ndim={x.ndim}, shape {tuple(x.shape)}")
    if x.size == 0:
        raise ValueError(f"{name} is empty (shape {tuple(x.shape)}); need at least one query and key")
    return x


def _labels(tokens, count: int, name: str, what: str) -> list[str] | None:
    if tokens is None:
        return None
    if isinstance(tokens, str) or not isinstance(tokens, Sequence):
        raise TypeError(f"{name} must be a sequence of strings; got {type(tokens).__name__}")
    if len(tokens) != count:
        raise ValueError(f"{name} has {len(tokens)} labels but the weights have {count} {what}")
    return [str(t) for t in tokens]


def _set_ticks(ax, axis: str, labels: list[str] | None, count: int, fontsize: float) -> None:
    if labels is None:
        return
    step = max(1, math.ceil(count / MAX_TICK_LABELS))
    pos = list(range(0, count, step))
    if axis == "x":
        ax.set_xticks(pos, [labels[i] for i in pos], rotation=90, fontsize=fontsize)
    else:
        ax.set_yticks(pos, [labels[i] for i in pos], fontsize=fontsize)


def _one_sequence(layer, index: int, name: str) -> np.ndarray:
    """A layer's weights for one sequence, (H, L, S)."""
    a = _array(layer, name, (3, 4), "(H, L, S) or (B, H, L, S)")
    if a.ndim == 4:
        if not -a.shape[0] <= index < a.shape[0]:
            raise ValueError(f"index {index} is out of range for {name} with batch size {a.shape[0]}")
        a = a[index]
    return a


@in_language
def plot_head(
    weights,
    tokens: Sequence[str] | None = None,
    *,
    key_tokens: Sequence[str] | None = None,
    title: str | None = None,
    cmap: str = "Blues",
    vmax: float | None = None,
    path: str | Path | None = None,
    dpi: int = 120,
    lang: str = "en",
):
    """Heatmap of one head's (L, S) weights, queries down the side, keys along the top axis.

    Args:
        weights: (L, S) tensor or array.
        tokens: labels of the queries, and of the keys too unless ``key_tokens`` is given
            (then L must equal S).
        key_tokens: labels of the keys, for cross-attention.
        title: figure title.
        cmap: matplotlib colormap name.
        vmax: top of the colour scale; None for the largest weight.
        path: write a PNG here.
        lang: the language of the axis words ("en" or "zh"; Chinese is drawn in a CJK font, see
            :func:`attnkit.inspect.figure_text.drawing_in`).
    """
    w = _array(weights, "weights", (2,), "(L, S) for one head; select one with weights[b, h]")
    L, S = w.shape
    q_labels = _labels(tokens, L, "tokens", "queries (L)")
    if key_tokens is not None:
        k_labels = _labels(key_tokens, S, "key_tokens", "keys (S)")
    elif tokens is not None and S != L:
        raise ValueError(
            f"tokens has {len(tokens)} labels, which label the L={L} queries; the S={S} keys need their own: "
            "pass key_tokens for cross-attention"
        )
    else:
        k_labels = q_labels
    side = lambda n: min(14.0, max(3.0, 0.22 * n + 1.5))  # noqa: E731 -- inches per axis
    fig = _figure(side(S) + 1.0, side(L))
    ax = fig.add_subplot()
    im = ax.imshow(w, cmap=cmap, vmin=0.0, vmax=vmax, interpolation="nearest", aspect="auto")
    fontsize = 8 if max(L, S) <= 30 else 6
    _set_ticks(ax, "x", k_labels, S, fontsize)
    _set_ticks(ax, "y", q_labels, L, fontsize)
    ax.set_xlabel(word(lang, "key"))
    ax.set_ylabel(word(lang, "query"))
    ax.xaxis.set_label_position("top")
    ax.xaxis.tick_top()
    fig.colorbar(im, ax=ax, label=word(lang, "weight"), shrink=0.8)
    if title:
        fig.suptitle(title)
    return _finish(fig, path, dpi)


@in_language
def plot_heads_grid(
    attentions,
    tokens: Sequence[str] | None = None,
    *,
    index: int = 0,
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
    cell_size: float = 1.6,
    cmap: str = "Blues",
    path: str | Path | None = None,
    dpi: int = 100,
    lang: str = "en",
):
    """A layer x head grid of small heatmaps on one shared colour scale (0 to 1, square-root
    stretched so weights of a few percent stay visible) with one colour bar for all of them.

    Args:
        attentions: a sequence of per-layer (H, L, S) or (B, H, L, S) weights (``index``
            picks the sequence), or one tensor (layers, H, L, S) / (layers, B, H, L, S).
        tokens: labels (length L, and S == L) drawn on the left column and bottom row when
            there are few enough to read.
        layers, heads: subsets to draw (default all).
        cell_size: inches per small heatmap.
        path: write a PNG here.
        lang: the language of the labels ("en" or "zh").
    """
    # capture(...).attentions knows each entry's real layer index; the row labels show it
    real = getattr(attentions, "layers", None)
    attentions = as_layer_list(attentions)
    real = list(range(len(attentions))) if real is None else list(real)
    data = [_one_sequence(a, index, f"attentions[{i}]") for i, a in enumerate(attentions)]
    L, S = data[0].shape[-2:]
    for i, a in enumerate(data):
        if a.shape[-2:] != (L, S):
            raise ValueError(f"every layer must share (L, S) = {(L, S)}; attentions[{i}] has {a.shape[-2:]}")
    labels = _labels(tokens, L, "tokens", "queries (L)")
    if labels is not None and S != L:
        raise ValueError(f"tokens label both axes here, so it needs L == S; got L={L}, S={S}")
    layer_ids = list(range(len(data))) if layers is None else list(layers)
    max_heads = max(a.shape[0] for a in data)
    head_ids = list(range(max_heads)) if heads is None else list(heads)
    for name, ids, n in (("layers", layer_ids, len(data)), ("heads", head_ids, max_heads)):
        bad = [i for i in ids if not (isinstance(i, int) and 0 <= i < n)]
        if bad or not ids:
            raise ValueError(f"{name} must be a non-empty list of ints in [0, {n}); got {list(ids)}")
    if cell_size <= 0:
        raise ValueError(f"cell_size must be positive (inches); got {cell_size}")

    rows, cols = len(layer_ids), len(head_ids)
    fig = _figure(cols * cell_size + 0.8, rows * cell_size + 0.6)
    axes = np.atleast_2d(fig.subplots(rows, cols, squeeze=False))
    show_labels = labels is not None and L <= 24
    from matplotlib.colors import PowerNorm

    norm = PowerNorm(gamma=0.5, vmin=0.0, vmax=1.0)  # one scale for every head: colours compare across panels
    im = None
    for r, li in enumerate(layer_ids):
        for c, hi in enumerate(head_ids):
            ax = axes[r, c]
            if hi >= data[li].shape[0]:  # this layer has fewer heads
                ax.axis("off")
                continue
            im = ax.imshow(data[li][hi], cmap=cmap, norm=norm, interpolation="nearest", aspect="auto")
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(word(lang, "head").format(hi), fontsize=8)
            if c == 0:
                ax.set_ylabel(word(lang, "layer").format(real[li]), fontsize=8)
                if show_labels:
                    ax.set_yticks(range(L), labels, fontsize=5)
            if r == rows - 1 and show_labels:
                ax.set_xticks(range(S), labels, fontsize=5, rotation=90)
    if im is not None:
        fig.colorbar(im, ax=axes, shrink=0.6, pad=0.01, label=word(lang, "shared"))
    return _finish(fig, path, dpi)


@in_language
def plot_diagnostics(
    summary,
    *,
    metric: str = "entropy",
    cmap: str = "viridis",
    path: str | Path | None = None,
    dpi: int = 120,
    lang: str = "en",
):
    """Per-head diagnostics of a :class:`~attnkit.inspect.metrics.HeadSummary`.

    Left: ``metric`` (e.g. normalised entropy) as a layers x heads image, each cell
    marked with its label's letter (D dead, U uniform, P previous, N next, S self,
    C content). Right: how many heads got each label. ``lang``: the language of the
    titles, axes and label names ("en" or "zh"; the letters stay the same).
    """
    from attnkit.inspect.metrics import HEAD_LABELS, HeadSummary  # noqa: PLC0415 -- keep plots importable alone

    if not isinstance(summary, HeadSummary):
        raise TypeError(f"summary must be a HeadSummary from classify_heads(); got {type(summary).__name__}")
    if len(summary) == 0:
        raise ValueError("summary has no heads")
    values = summary.metric(metric).numpy()  # raises ValueError naming valid metrics
    n_layers, n_heads = values.shape
    fig = _figure(max(6.0, 0.45 * n_heads + 4.5), max(3.0, 0.4 * n_layers + 1.5))
    ax, bar = fig.subplots(1, 2, width_ratios=[max(n_heads, 3), 3])
    finite = values[np.isfinite(values)]
    vmax = 1.0 if metric == "entropy" else (float(finite.max()) if finite.size else 1.0)
    im = ax.imshow(values, cmap=cmap, vmin=0.0, vmax=max(vmax, 1e-12), interpolation="nearest", aspect="auto")
    row = {layer: i for i, layer in enumerate(summary.layers)}  # real layer index -> image row
    for s in summary:
        value = values[row[s.layer], s.head]
        # Dark text on the bright end of viridis, light text elsewhere.
        bright = np.isfinite(value) and value > 0.6 * vmax
        ax.text(s.head, row[s.layer], LABEL_CODES.get(s.label, "?"), ha="center", va="center",
                fontsize=8, color="black" if bright else "white")
    ax.set_xticks(range(n_heads))
    ax.set_yticks(range(n_layers), [str(layer) for layer in summary.layers])
    ax.set_xlabel(word(lang, "head_axis"))
    ax.set_ylabel(word(lang, "layer_axis"))
    ax.set_title(metric_name(lang, metric))
    fig.colorbar(im, ax=ax, shrink=0.8, label=word(lang, "entropy_scale") if metric == "entropy" else None)
    counts = summary.counts()
    names = list(HEAD_LABELS)
    bar.barh(range(len(names)), [counts[n] for n in names], color="#4477aa")
    bar.set_yticks(range(len(names)), [f"{LABEL_CODES[n]}  {label_name(lang, n)}" for n in names], fontsize=8)
    bar.invert_yaxis()
    bar.set_xlabel(word(lang, "heads_count"))
    bar.set_title(word(lang, "labels"))
    return _finish(fig, path, dpi)


def _image(image, name: str = "image") -> np.ndarray:
    img = image.detach().cpu().numpy() if isinstance(image, Tensor) else np.asarray(image)
    if img.ndim == 3 and img.shape[0] in (1, 3, 4) and img.shape[-1] not in (1, 3, 4):
        img = np.moveaxis(img, 0, -1)  # channels-first (C, H, W) -> (H, W, C)
    if img.ndim == 3 and img.shape[-1] == 1:
        img = img[..., 0]
    if not (img.ndim == 2 or (img.ndim == 3 and img.shape[-1] in (3, 4))):
        raise ValueError(f"{name} must be (H, W), (H, W, 3|4) or (3|4, H, W); got shape {tuple(img.shape)}")
    if img.dtype != np.uint8:
        img = np.clip(img.astype(np.float64), 0.0, 1.0)  # float images are taken as [0, 1]
    return img


@in_language
def plot_patch_map(
    weights,
    grid: tuple[int, int],
    *,
    query: int | None = None,
    num_prefix_tokens: int = 0,
    image=None,
    alpha: float = 0.6,
    cmap: str = "inferno",
    title: str | None = None,
    path: str | Path | None = None,
    dpi: int = 120,
    lang: str = "en",
):
    """One query's attention over an h x w patch grid, optionally over the image.

    Args:
        weights: (S,) weights of one query, or (L, S) with ``query`` picking the row.
            S must be ``num_prefix_tokens + h * w`` (keys in raster order after the prefix).
        grid: (h, w) patch rows and columns.
        query: row of a 2-D ``weights``. When queries are the same tokens as keys (L == S)
            and the query is a patch, that patch is outlined.
        num_prefix_tokens: keys before the patches ([CLS], registers); their total weight
            is printed in the title, since it is not on the grid.
        image: optional (H, W), (H, W, 3|4) or (3|4, H, W) image (uint8, or float in [0, 1])
            stretched under the grid.
        alpha: opacity of the heat grid over the image.
        lang: the language of the colour bar and the title's additions ("en" or "zh").
    """
    w = _array(weights, "weights", (1, 2), "(S,) for one query or (L, S) with query=")
    if (
        not isinstance(grid, (tuple, list))
        or len(grid) != 2
        or not all(isinstance(g, int) and not isinstance(g, bool) and g > 0 for g in grid)
    ):
        raise ValueError(f"grid must be (h, w), two positive ints; got {grid!r}")
    h, wd = grid
    if isinstance(num_prefix_tokens, bool) or not isinstance(num_prefix_tokens, int) or num_prefix_tokens < 0:
        raise ValueError(f"num_prefix_tokens must be a non-negative int; got {num_prefix_tokens!r}")
    w, square = _query_row(w, query)
    S = w.shape[0]
    if S != num_prefix_tokens + h * wd:
        raise ValueError(
            f"weights has S={S} keys but grid {h}x{wd} with num_prefix_tokens={num_prefix_tokens} needs "
            f"{num_prefix_tokens + h * wd}; set num_prefix_tokens to the number of [CLS]/register tokens"
        )
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1]; got {alpha}")
    heat = w[num_prefix_tokens:].reshape(h, wd)
    fig = _figure(min(10.0, 0.35 * wd + 3.0), min(10.0, 0.35 * h + 2.2))
    ax = fig.add_subplot()
    extent = (0, wd, h, 0)  # patch units, row 0 on top
    if image is not None:
        ax.imshow(_image(image), extent=extent, cmap="gray", interpolation="bilinear")
    im = ax.imshow(heat, extent=extent, cmap=cmap, vmin=0.0, interpolation="nearest",
                   alpha=alpha if image is not None else 1.0)
    if square and query is not None and query >= num_prefix_tokens:
        r, c = divmod(query - num_prefix_tokens, wd)
        from matplotlib.patches import Rectangle  # noqa: PLC0415 -- matplotlib is imported lazily

        ax.add_patch(Rectangle((c, r), 1, 1, fill=False, edgecolor="cyan", linewidth=2))
    ax.set_xlim(0, wd)
    ax.set_ylim(h, 0)
    ax.set_xticks([])
    ax.set_yticks([])
    fig.colorbar(im, ax=ax, shrink=0.8, label=word(lang, "weight"))
    parts = [title] if title else []
    if query is not None:
        parts.append(word(lang, "query_n").format(query))
    if num_prefix_tokens:
        parts.append(word(lang, "prefix_mass").format(float(w[:num_prefix_tokens].sum())))
    if parts:
        ax.set_title(" | ".join(parts), fontsize=9)
    return _finish(fig, path, dpi)


def _query_row(w: np.ndarray, query) -> tuple[np.ndarray, bool]:
    """The (S,) weights of one query: ``w`` itself when 1-D, else row ``query`` of the (L, S)
    ``w``; and whether the queries are the keys' own tokens (L == S)."""
    if w.ndim == 1:
        return w, False
    if query is None:
        raise ValueError(f"weights has shape {w.shape} (L, S): pass query= to pick one of the {w.shape[0]} rows")
    if isinstance(query, bool) or not isinstance(query, int) or not 0 <= query < w.shape[0]:
        raise ValueError(f"query must be an int in [0, {w.shape[0]}); got {query!r}")
    return w[query], w.shape[0] == w.shape[1]
