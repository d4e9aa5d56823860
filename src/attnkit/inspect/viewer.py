"""Self-contained interactive HTML viewer for the attention weights of one sequence.

In the spirit of bertviz's head view (Vig 2019, "A Multiscale Visualization of
Attention in the Transformer Model", https://arxiv.org/abs/1906.05714): queries on the
left, keys on the right, one line per weight with opacity = weight, a layer and a head
selector (or all heads overlaid, one colour each), hover to isolate a token's lines.
Also a matrix view, and optionally a patch-grid view (ViT, Dosovitskiy et al. 2020,
https://arxiv.org/abs/2010.11929), a time-series view and a per-head diagnostics table
(:func:`attnkit.inspect.metrics.classify_heads`). Weights show where the softmax put
its mass; they are not explanations.

The page's own words (headings, labels, notes, tooltips) are in English or Chinese (``lang``), taken from
:mod:`attnkit.inspect.viewer_text`; :mod:`attnkit.inspect.viewer_language` puts a saved page into the other.

The page needs no network: the script and style are inlined from ``assets/``, the data
is JSON inside ``<script type="application/json">``, and a Content-Security-Policy
forbids any fetch. User text (tokens, titles, table cells) is escaped for the
JSON-in-script context (``<``, ``>``, ``&`` as ``\\u003c``...: so ``</script>`` cannot end
the element) and set with ``textContent`` in the page, never parsed as HTML.

Shape legend:
    H: heads    L: queries    S: keys    h, w: patch grid rows and columns
    attentions: per-layer (H, L, S), or (B, H, L, S) with ``index`` picking the sequence.
"""

from __future__ import annotations

import base64
import html
import json
import math
import struct
import warnings
import zlib
from collections.abc import Sequence
from functools import cache
from importlib import resources
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from attnkit.inspect.layer_list import as_layer_list
from attnkit.inspect.viewer_text import ui_text

__all__ = ["render_html", "save_html"]

#: Weights above this count make a page of tens of MB; render_html warns.
LARGE_PAGE_WEIGHTS = 4_000_000
#: Longest side of an embedded patch image, in pixels (larger ones are subsampled).
MAX_IMAGE_SIDE = 512


@cache
def _asset(name: str) -> str:
    text = resources.files("attnkit.inspect").joinpath("assets", name).read_text(encoding="utf-8")
    if "</script" in text.lower() or "</style" in text.lower():  # would end the inline element early
        raise RuntimeError(f"attnkit asset {name} contains a closing tag and cannot be inlined")
    return text


def _json_for_script(obj) -> str:
    """JSON that is safe inside ``<script type="application/json">``.

    ``<``, ``>`` and ``&`` only occur inside JSON strings, where ``\\u003c`` etc. decode to
    the same characters, so ``JSON.parse`` gives back the original text while the HTML
    parser never sees ``</script`` or ``<!--``. U+2028/2029 are escaped for old JS parsers.
    """
    text = json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    for raw, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                     ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(raw, esc)
    return text


def _to_numpy(x, name: str) -> np.ndarray:
    if isinstance(x, Tensor):
        return x.detach().to("cpu", torch.float64).numpy()
    try:
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a tensor or array of numbers; got {type(x).__name__}") from None


def _layers(attentions, index: int) -> list[np.ndarray]:
    """Per-layer (H, L, S) float64 arrays for one sequence."""
    attentions = as_layer_list(attentions)
    out = []
    for i, a in enumerate(attentions):
        a = _to_numpy(a, f"attentions[{i}]")
        if a.ndim == 4:
            if isinstance(index, bool) or not isinstance(index, int) or not -a.shape[0] <= index < a.shape[0]:
                raise ValueError(
                    f"index must be an int in [0, {a.shape[0]}) (the batch of attentions[{i}]); got {index!r}"
                )
            a = a[index]
        if a.ndim != 3:
            raise ValueError(f"attentions[{i}] must be (H, L, S) or (B, H, L, S); got shape {tuple(a.shape)}")
        if 0 in a.shape:
            raise ValueError(f"attentions[{i}] is empty (shape {tuple(a.shape)})")
        if not np.isfinite(a).all():
            raise ValueError(
                f"attentions[{i}] contains NaN or inf (fully masked rows from a softmax?); "
                "replace them first, e.g. weights.nan_to_num(0.0)"
            )
        if a.min() < -1e-6 or a.max() > 1 + 1e-6:
            raise ValueError(
                f"attentions[{i}] has values in [{a.min():.3g}, {a.max():.3g}]; expected softmax weights in [0, 1] "
                "(pass the weights, not the raw scores)"
            )
        if out and a.shape[1:] != out[0].shape[1:]:
            raise ValueError(
                f"every layer must share (L, S); attentions[0] has {out[0].shape[1:]}, "
                f"attentions[{i}] has {a.shape[1:]}"
            )
        out.append(a)
    return out


def _labels(tokens, count: int, name: str, what: str) -> list[str]:
    if isinstance(tokens, str) or not isinstance(tokens, Sequence):
        raise TypeError(f"{name} must be a sequence of strings; got {type(tokens).__name__}")
    if len(tokens) != count:
        raise ValueError(f"{name} has {len(tokens)} labels but the weights have {count} {what}")
    return [str(t) for t in tokens]


def _png_data_uri(image) -> str:
    """Encode an (H, W), (H, W, 3|4) or (3|4, H, W) image as a PNG data: URI (no extra dependency)."""
    img = image.detach().cpu().numpy() if isinstance(image, Tensor) else np.asarray(image)
    if img.ndim == 3 and img.shape[0] in (1, 3, 4) and img.shape[-1] not in (1, 3, 4):
        img = np.moveaxis(img, 0, -1)  # channels-first -> channels-last
    if img.ndim == 3 and img.shape[-1] == 1:
        img = img[..., 0]
    if img.ndim == 2:
        img = np.repeat(img[..., None], 3, axis=-1)
    if img.ndim != 3 or img.shape[-1] not in (3, 4):
        raise ValueError(f"image must be (H, W), (H, W, 3|4) or (3|4, H, W); got shape {tuple(np.shape(image))}")
    if img.dtype != np.uint8:
        img = np.rint(np.clip(img.astype(np.float64), 0.0, 1.0) * 255).astype(np.uint8)  # floats are [0, 1]
    step = max(1, math.ceil(max(img.shape[:2]) / MAX_IMAGE_SIDE))
    img = np.ascontiguousarray(img[::step, ::step])
    h, w, c = img.shape
    raw = b"".join(b"\x00" + img[r].tobytes() for r in range(h))  # filter type 0 per scanline

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    color_type = 6 if c == 4 else 2
    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, color_type, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _json_value(v):
    if isinstance(v, (bool, int, str)) or v is None:
        return v
    if isinstance(v, float):
        return None if not math.isfinite(v) else v
    if isinstance(v, (np.generic, Tensor)):
        return _json_value(v.item())
    return str(v)


def _diagnostics(diagnostics) -> dict:
    from attnkit.inspect.metrics import HeadSummary  # noqa: PLC0415 -- only needed for this branch

    if isinstance(diagnostics, HeadSummary):
        rows = diagnostics.to_rows()
    elif isinstance(diagnostics, Sequence) and all(isinstance(r, dict) for r in diagnostics):
        rows = list(diagnostics)
    else:
        raise TypeError(
            f"diagnostics must be a HeadSummary or a list of dict rows; got {type(diagnostics).__name__}"
        )
    columns: list[str] = []
    for r in rows:
        columns += [str(k) for k in r if str(k) not in columns]
    return {
        "columns": columns,
        "rows": [[_json_value(r.get(c)) for c in columns] for r in rows],
    }


def _layer_ids(attentions, count: int) -> list[int]:
    """The real layer index of each of the ``count`` entries: ``capture(...).attentions`` carries
    them (the page names layers by them); otherwise 0, 1, ..."""
    layer_ids = getattr(attentions, "layers", None)
    return list(range(count)) if layer_ids is None else [int(i) for i in layer_ids]


def _warn_if_large(layers: list[np.ndarray]) -> None:
    """Warn (at render_html's caller) when the weights would make a page of tens of MB."""
    total = sum(a.size for a in layers)
    if total > LARGE_PAGE_WEIGHTS:
        warnings.warn(
            f"render_html: {total} weights make a large page (~{total * 5 // 1_000_000} MB); "
            "pass fewer layers or a shorter sequence",
            stacklevel=3,
        )


def _query_key_labels(tokens, key_tokens, L: int, S: int) -> tuple[list[str], list[str]]:
    """Labels of the L queries and the S keys: the keys share the queries' labels when
    ``key_tokens`` is None and L == S; default "0", "1", ..."""
    queries = [str(i) for i in range(L)] if tokens is None else _labels(tokens, L, "tokens", "queries (L)")
    if key_tokens is not None:
        keys = _labels(key_tokens, S, "key_tokens", "keys (S)")
    elif S == L:
        keys = queries
    elif tokens is None:
        keys = [str(j) for j in range(S)]
    else:
        raise ValueError(
            f"tokens has {L} labels for the L={L} queries, but the S={S} keys need their own: pass key_tokens"
        )
    return queries, keys


def _patch_data(patch_grid, num_prefix_tokens, image, S: int) -> dict:
    """The page's patch view: the (h, w) grid of the keys after ``num_prefix_tokens``, checked
    against the S keys, and the image under it as a PNG data URI (or None)."""
    if (
        not isinstance(patch_grid, (tuple, list))
        or len(patch_grid) != 2
        or not all(isinstance(g, int) and not isinstance(g, bool) and g > 0 for g in patch_grid)
    ):
        raise ValueError(f"patch_grid must be (h, w), two positive ints; got {patch_grid!r}")
    if isinstance(num_prefix_tokens, bool) or not isinstance(num_prefix_tokens, int) or num_prefix_tokens < 0:
        raise ValueError(f"num_prefix_tokens must be a non-negative int; got {num_prefix_tokens!r}")
    h, w = patch_grid
    if S != num_prefix_tokens + h * w:
        raise ValueError(
            f"patch_grid {h}x{w} with num_prefix_tokens={num_prefix_tokens} needs S={num_prefix_tokens + h * w} "
            f"keys; the weights have S={S}"
        )
    return {
        "grid": [h, w],
        "prefix": num_prefix_tokens,
        "image": None if image is None else _png_data_uri(image),
    }


def _series_data(series, series_name, S: int) -> dict:
    """The page's time-series view: one value per key (S), NaN and inf as gaps (null)."""
    values = _to_numpy(series, "series")
    if values.ndim != 1 or values.shape[0] != S:
        raise ValueError(f"series must be 1-D with one value per key (S={S}); got shape {tuple(values.shape)}")
    return {
        "name": str(series_name),
        "values": [float(v) if math.isfinite(v) else None for v in values.tolist()],
    }


def render_html(
    attentions,
    tokens: Sequence[str] | None = None,
    *,
    key_tokens: Sequence[str] | None = None,
    index: int = 0,
    title: str | None = None,
    patch_grid: tuple[int, int] | None = None,
    num_prefix_tokens: int = 0,
    image=None,
    series=None,
    series_name: str | None = None,
    diagnostics=None,
    decimals: int = 4,
    lang: str = "en",
) -> str:
    """One self-contained HTML page (a string) to explore the attention of one sequence.

    Args:
        attentions: per-layer weights, each (H, L, S) or (B, H, L, S) (``index`` picks the
            sequence); or one (layers, H, L, S) / (layers, B, H, L, S) tensor. Heads may
            differ per layer; L and S may not.
        tokens: labels of the L queries, and of the keys too when ``key_tokens`` is None
            (then L must equal S); default "0", "1", ...
        key_tokens: labels of the S keys, for cross-attention.
        title: page title; default "attnkit attention viewer" in ``lang``.
        patch_grid: (h, w): keys ``num_prefix_tokens:`` form an h x w patch grid in raster
            order; adds a patch view (click a patch to make it the query when L == S).
        num_prefix_tokens: keys before the patches ([CLS], registers).
        image: optional image shown under the patch grid: (H, W), (H, W, 3|4) or
            (3|4, H, W), uint8 or float in [0, 1]; embedded as PNG.
        series: optional 1-D values, one per key (length S; NaN = gap); adds a time-series
            view where the selected step's attention over the steps is drawn as shading.
        series_name: legend name of ``series``; default "series" in ``lang``.
        diagnostics: a :class:`~attnkit.inspect.metrics.HeadSummary` or a list of dict rows
            to show as a table (rows with "layer" and "head" select that head on click).
        decimals: weights are rounded to this many decimals (stored as integers) to keep
            the page small.
        lang: the language of the page's own words (``"en"`` or ``"zh"``,
            :mod:`attnkit.inspect.viewer_text`); the tokens and title are shown as given.

    Returns:
        the HTML document as a string.
    """
    layers = _layers(attentions, index)
    layer_ids = _layer_ids(attentions, len(layers))
    _, L, S = layers[0].shape
    if isinstance(decimals, bool) or not isinstance(decimals, int) or not 1 <= decimals <= 6:
        raise ValueError(f"decimals must be an int in [1, 6]; got {decimals!r}")
    ui = ui_text(lang)
    title = ui["page"]["default_title"] if title is None else title
    if not isinstance(title, str):
        raise TypeError(f"title must be a str; got {type(title).__name__}")
    queries, keys = _query_key_labels(tokens, key_tokens, L, S)
    _warn_if_large(layers)

    scale = 10**decimals
    data: dict = {
        "title": title,
        "decimals": decimals,
        "queries": queries,
        "keys": keys,
        # w[layer][head][query][key] as integers: weight = value / 10**decimals.
        "layers": [np.rint(a * scale).astype(np.int64).tolist() for a in layers],
        "layer_ids": layer_ids,  # real layer index of each entry of "layers"
        "patch": None,
        "series": None,
        "diagnostics": None,
    }
    if patch_grid is not None:
        data["patch"] = _patch_data(patch_grid, num_prefix_tokens, image, S)
    elif image is not None:
        raise ValueError("image is drawn under the patch grid: pass patch_grid=(h, w) too")
    if series is not None:
        data["series"] = _series_data(series, ui["page"]["default_series"] if series_name is None else series_name, S)
    if diagnostics is not None:
        data["diagnostics"] = _diagnostics(diagnostics)

    return _page(_json_for_script(data), title, lang)


def _page(data_json: str, title: str, lang: str) -> str:
    """The page around ``data_json`` (already escaped for a script element), its words in ``lang``."""
    ui = ui_text(lang)
    return _PAGE.format(
        title=html.escape(title),
        p={k: html.escape(v) for k, v in ui["page"].items()},
        css=_asset("viewer.css"),
        js=_asset("viewer.js"),
        ui=_json_for_script({k: ui[k] for k in ("script", "columns", "labels", "phrases")}),
        data=data_json,
    )


def save_html(path: str | Path, attentions, tokens: Sequence[str] | None = None, **kwargs) -> Path:
    """Write :func:`render_html` ``(attentions, tokens, **kwargs)`` to ``path`` (UTF-8,
    parent folders created) and return the path."""
    path = Path(path)
    page = render_html(attentions, tokens, **kwargs)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path


# The page skeleton. Only {title} and the words {p[...]} (escaped), the two assets and the escaped JSON go in;
# everything the user typed reaches the DOM through textContent in viewer.js.
_PAGE = """<!DOCTYPE html>
<html lang="{p[html_lang]}">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="attnkit">
<title>{title}</title>
<link rel="icon" href="data:,">
<style>
{css}
</style>
</head>
<body>
<h1 id="ak-title"></h1>
<div id="ak-sub" class="ak-sub"></div>
<noscript>{p[noscript]}</noscript>
<div class="ak-controls">
  <label>{p[layer]}<select id="ak-layer" aria-label="{p[aria_layer]}"></select></label>
  <label>{p[head]}<select id="ak-head" aria-label="{p[aria_head]}"></select></label>
  <span id="ak-status" class="ak-status" aria-live="polite"></span>
</div>
<div class="ak-grid">
<section id="ak-head-view" class="ak-section">
  <h2>{p[head_view]}</h2>
  <div id="ak-legend" class="ak-legend"></div>
  <div class="ak-hv">
    <div id="ak-left" class="ak-col ak-left"></div>
    <svg id="ak-lines" class="ak-lines" role="img" aria-label="{p[aria_lines]}"></svg>
    <div id="ak-right" class="ak-col ak-right"></div>
  </div>
  <div id="ak-hv-note" class="ak-note"></div>
</section>
<section id="ak-matrix-view" class="ak-section">
  <h2>{p[matrix_view]}</h2>
  <canvas id="ak-matrix" class="ak-canvas"></canvas>
  <div id="ak-matrix-note" class="ak-note"></div>
  <div id="ak-matrix-info" class="ak-info"></div>
</section>
<section id="ak-patch-view" class="ak-section" hidden>
  <h2>{p[patch_view]}</h2>
  <label>{p[query]}<select id="ak-patch-query" aria-label="{p[aria_patch_query]}"></select></label>
  <canvas id="ak-patch" class="ak-canvas"></canvas>
  <div id="ak-patch-info" class="ak-info"></div>
</section>
</div>
<section id="ak-series-view" class="ak-section" hidden>
  <h2>{p[time_series]}</h2>
  <label>{p[step]} <input id="ak-step" type="range" step="1" aria-label="{p[aria_step]}"></label>
  <span id="ak-step-label" class="ak-status"></span>
  <div><svg id="ak-series" role="img" aria-label="{p[aria_series]}"></svg></div>
  <div id="ak-series-info" class="ak-info"></div>
</section>
<section id="ak-diag-view" class="ak-section" hidden>
  <h2>{p[diagnostics]}</h2>
  <div class="ak-note">{p[diag_note]}</div>
  <table id="ak-diag" class="ak-table"></table>
</section>
<script type="application/json" id="ak-ui">{ui}</script>
<script type="application/json" id="ak-data">{data}</script>
<script>
{js}
</script>
</body>
</html>
"""
