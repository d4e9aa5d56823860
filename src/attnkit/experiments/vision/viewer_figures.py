"""The MHSA2d and ViT attention maps of a finished vision run, drawn again from the weights its
interactive viewers hold (``viewer_mhsa.html``, ``viewer_vit.html``, written by
:func:`attnkit.inspect.save_html` beside the figures), so that a committed run gets their Chinese
copies without its trained models (``python -m attnkit.experiments.redraw_zh``).

A viewer stores, for the one pictured image: every recorded layer's weights (heads, T, T) rounded to
``decimals`` places (rows are scaled back to sum 1 here), the patch grid (h, w), the number of
prefix tokens, the image as a PNG and a title ending in the image's class, ``"... (Trouser)"``.
The figures are those of :func:`.plots.make_figures`, drawn by the same functions
(:func:`.map_figures.pixel_attention_figure`, :func:`.map_figures.vit_attention_figure`).

Shape legend: heads attention heads, T = prefix + h·w tokens, H×W image pixels.
"""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path
from typing import Callable

import numpy as np
import torch

VIEWERS = {"mhsa_query.png": "viewer_mhsa.html", "vit_attention.png": "viewer_vit.html"}  # figure -> viewer it is drawn from


def read_viewer(path: str | Path) -> dict | None:
    """The data of a viewer page: ``layers`` (list of (heads, T, T) float64 tensors, rows summing to 1),
    ``grid`` (h, w), ``prefix`` (int), ``image`` ((H, W) float in [0, 1], or None) and ``label`` (the
    class named at the end of the title, or None); None when the file is missing or holds no patch grid."""
    path = Path(path)
    if not path.is_file():
        return None
    m = re.search(r'<script type="application/json" id="ak-data">(.*?)</script>', path.read_text(encoding="utf-8"), re.S)
    data = json.loads(m.group(1)) if m else {}
    patch = data.get("patch")
    if not patch or not data.get("layers"):
        return None
    scale = 10.0 ** data["decimals"]
    layers = []
    for w in data["layers"]:
        t = torch.tensor(w, dtype=torch.float64) / scale  # (heads, T, T)
        layers.append(t / t.sum(-1, keepdim=True).clamp_min(1e-12))  # the rounding left rows off 1 by up to T·0.5e-4
    label = re.search(r"\(([^()]*)\)\s*$", data.get("title", ""))
    return {"layers": layers, "grid": tuple(patch["grid"]), "prefix": int(patch["prefix"]),
            "image": _png_image(patch["image"]) if patch.get("image") else None, "label": label.group(1) if label else None}


def _png_image(uri: str) -> np.ndarray:
    """A PNG ``data:`` URI as an (H, W) grey image in [0, 1] (the viewer stores grey images as RGB)."""
    from matplotlib.image import imread

    img = imread(io.BytesIO(base64.b64decode(uri.split(",", 1)[1])), format="png")  # (H, W, 3|4) floats in [0, 1]
    return np.asarray(img[..., :3].mean(-1) if img.ndim == 3 else img, dtype=np.float64)


def viewer_figures(run_dir: str | Path) -> list[tuple[str, Callable]]:
    """``(file name, draw(lang) -> figure)`` of the attention maps whose viewer is in ``run_dir``."""
    from .map_figures import pixel_attention_figure, vit_attention_figure

    out = []
    mhsa = read_viewer(Path(run_dir) / VIEWERS["mhsa_query.png"])
    if mhsa is not None and mhsa["prefix"] == 0 and mhsa["grid"][0] == mhsa["grid"][1]:
        w, side = mhsa["layers"][-1], mhsa["grid"][0]  # (heads, N, N), the last stage's map
        out.append(("mhsa_query.png", lambda lang: pixel_attention_figure(w, side, mhsa["image"], mhsa["label"], lang)))
    vit = read_viewer(Path(run_dir) / VIEWERS["vit_attention.png"])
    if vit is not None:
        attentions = [a[None] for a in vit["layers"]]  # each (1, heads, T, T), as captured
        out.append(("vit_attention.png", lambda lang: vit_attention_figure(attentions, vit["grid"], vit["image"], vit["label"], lang)))
    return out
