"""A generated multi-object detection set, offline: Fashion-MNIST items and drawn shapes at varied
scales on cluttered canvases, in two variants.

* ``"objects"``: classes Trouser, Sneaker, Bag (Fashion-MNIST items from
  :func:`attnkit.data.images.load_images`; scikit-learn digits 1, 7, 8 where the Debian package is
  missing, with a notice) and circle, square, triangle (drawn). Each canvas holds 1–``max_objects``
  objects of side 12–40 % of the canvas, placed with little overlap, over clutter: thin random lines,
  small specks and pixel noise that are not objects.
* ``"context"``: every object is a circle or a square, and its class also says where a *distant cue*
  is — a bright bar along the top or the bottom edge of the canvas: ``circle/top``, ``circle/bottom``,
  ``square/top``, ``square/bottom``. The object looks the same in both; only a model that relates
  the object to the far edge can name it, which is what global context (self-attention) is said to
  add. Objects keep away from the bars, so the cue never touches the box.

Every canvas is drawn from a generator seeded by (seed, split, index): the set is the same on every
machine, and train and val never share a canvas.

Shape legend: N canvases, S×S pixels, M objects per canvas (padded).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from .detection_set import DetectionSet, pad_targets
from .images import load_images

ITEM_CLASSES = (1, 7, 8)  # Fashion-MNIST: Trouser, Sneaker, Bag (distinct silhouettes at small sizes)
SHAPES = ("circle", "square", "triangle")
VARIANTS = ("objects", "context")


def _shape_mask(kind: str, side: int, rng: np.random.Generator) -> np.ndarray:
    """A filled shape (circle, square or triangle) filling a side×side box, values in {0, 1}."""
    yy, xx = np.mgrid[0:side, 0:side] + 0.5
    c = side / 2
    if kind == "circle":
        return ((yy - c) ** 2 + (xx - c) ** 2 <= c * c).astype(np.float32)
    if kind == "square":
        return np.ones((side, side), np.float32)
    return (np.abs(xx - c) <= yy / 2).astype(np.float32)  # triangle, apex up, base on the bottom row


def _item_mask(img: np.ndarray, side: int) -> np.ndarray:
    """A 28×28 item cropped to its pixels above 0.1 and resized so its longer side is ``side``."""
    ys, xs = np.nonzero(img > 0.1)
    crop = img[ys.min(): ys.max() + 1, xs.min(): xs.max() + 1]
    h, w = crop.shape
    s = side / max(h, w)
    out = F.interpolate(torch.from_numpy(crop)[None, None], size=(max(2, round(h * s)), max(2, round(w * s))),
                        mode="bilinear", align_corners=False)[0, 0].numpy()
    return np.clip(out, 0, 1)


def _clutter(canvas: np.ndarray, rng: np.random.Generator) -> None:
    """Lines, specks and noise: structure that is not an object, so the detector must tell them apart."""
    S = canvas.shape[0]
    for _ in range(rng.integers(2, 5)):  # thin lines
        x0, y0, x1, y1 = rng.uniform(0, S, 4)
        t = np.linspace(0, 1, 2 * S)
        canvas[np.clip((y0 + t * (y1 - y0)).astype(int), 0, S - 1), np.clip((x0 + t * (x1 - x0)).astype(int), 0, S - 1)] = rng.uniform(0.3, 0.7)
    for _ in range(rng.integers(3, 8)):  # specks of 2–4 pixels
        y, x, s = rng.integers(0, S - 4), rng.integers(0, S - 4), rng.integers(2, 5)
        canvas[y: y + s, x: x + s] = np.maximum(canvas[y: y + s, x: x + s], rng.uniform(0.3, 0.8))
    canvas += rng.normal(0, 0.04, canvas.shape).astype(np.float32)


def _place(occupied: list, side_hw: tuple[int, int], lo: int, hi: int, rng: np.random.Generator):
    """A top-left corner for an h×w box in rows/cols [lo, hi) overlapping no placed box by IoU > 0.1."""
    h, w = side_hw
    for _ in range(30):
        y, x = int(rng.integers(lo, hi - h)), int(rng.integers(0, hi - w + lo if lo else hi - w))
        box = (x, y, x + w, y + h)
        if all(_iou(box, b) < 0.1 for b in occupied):
            return box
    return None


def _iou(a, b) -> float:
    iw = max(0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def _canvas(variant: str, size: int, max_objects: int, items: dict, rng: np.random.Generator):
    """One canvas (S, S) and its rows ``[class, x1, y1, x2, y2]`` (pixels, tight around the drawn pixels)."""
    canvas = np.zeros((size, size), np.float32)
    _clutter(canvas, rng)
    rows, occupied = [], []
    margin = size // 8 if variant == "context" else 0  # keep objects off the cue bars
    cue = int(rng.integers(2)) if variant == "context" else 0
    if variant == "context":
        bar = slice(0, 4) if cue == 0 else slice(size - 4, size)
        canvas[bar, size // 8: size - size // 8] = 1.0
    for _ in range(rng.integers(1, max_objects + 1)):
        side = int(rng.uniform(0.12, 0.40) * size)
        if variant == "context":
            kind = int(rng.integers(2))
            mask, label = _shape_mask(SHAPES[kind], side, rng), 2 * kind + cue
        else:
            label = int(rng.integers(len(ITEM_CLASSES) + len(SHAPES)))
            if label < len(ITEM_CLASSES):
                pool = items[label]
                mask = _item_mask(pool[int(rng.integers(len(pool)))], side)
            else:
                mask = _shape_mask(SHAPES[label - len(ITEM_CLASSES)], side, rng)
        box = _place(occupied, mask.shape, margin, size - margin, rng)
        if box is None:
            continue  # no room left: fewer objects on this canvas
        x1, y1, x2, y2 = box
        canvas[y1:y2, x1:x2] = np.maximum(canvas[y1:y2, x1:x2], mask * rng.uniform(0.6, 1.0))
        ys, xs = np.nonzero(mask > 0.1)
        occupied.append(box)
        rows.append([label, x1 + xs.min(), y1 + ys.min(), x1 + xs.max() + 1, y1 + ys.max() + 1])
    return np.clip(canvas, 0, 1), rows


def make_detection_set(variant: str = "objects", *, n_train: int = 512, n_val: int = 128, size: int = 96,
                       max_objects: int = 4, seed: int = 0) -> DetectionSet:
    """The generated set (see the module docstring); ``size`` a multiple of 32."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if not isinstance(size, int) or size < 64 or size % 32:
        raise ValueError(f"size must be a multiple of 32 and at least 64 (the detector's P5 stride), got {size!r}")
    for name, v in (("n_train", n_train), ("n_val", n_val), ("max_objects", max_objects)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an int >= 1, got {v!r}")
    notice, items, classes = None, {}, ("circle/top", "circle/bottom", "square/top", "square/bottom")
    if variant == "objects":
        src = load_images("auto", train_limit=6000, test_limit=100)
        notice = src.notice
        x, y = src.train_x[:, 0].numpy(), src.train_y.numpy()
        items = {i: x[y == c] for i, c in enumerate(ITEM_CLASSES)}
        classes = tuple(str(src.classes[c]) for c in ITEM_CLASSES) + SHAPES
    splits = {}
    for split, n, code in (("train", n_train, 0), ("val", n_val, 1)):
        drawn = [_canvas(variant, size, max_objects, items, np.random.default_rng([seed, code, i])) for i in range(n)]
        splits[split] = (torch.from_numpy(np.stack([c for c, _ in drawn]))[:, None], pad_targets([r for _, r in drawn]))
    return DetectionSet(f"synthetic-{variant}", *splits["train"], *splits["val"], classes=classes,
                        source=f"generated (attnkit.data.detection_synth, variant {variant!r}, seed {seed})", notice=notice)


__all__ = ["make_detection_set", "VARIANTS", "SHAPES"]
