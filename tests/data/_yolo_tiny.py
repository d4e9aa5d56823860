"""A tiny YOLO-format folder for the detection tests: one or two bright squares or discs per 64×64
image, written as PNGs and label files; ``classes=1`` labels both "object"."""

from __future__ import annotations

import numpy as np
import torch

from attnkit.data.detection_set import DetectionSet, pad_targets
from attnkit.data.yolo_folder import write_yolo_folder


def _split(n: int, seed: int, classes: int):
    g = np.random.default_rng(seed)
    x = np.zeros((n, 1, 64, 64), np.float32)
    rows = []
    yy, xx = np.mgrid[0:64, 0:64]
    for i in range(n):
        r = []
        for k in range(int(g.integers(1, 3))):
            s = int(g.integers(14, 26))
            x1, y1 = int(g.integers(0, 64 - s)), int(g.integers(0, 64 - s))
            if any(min(x1 + s, b[3]) > max(x1, b[1]) and min(y1 + s, b[4]) > max(y1, b[2]) for b in r):
                continue  # no overlap
            c = int(g.integers(2))
            if c == 0:
                x[i, 0, y1:y1 + s, x1:x1 + s] = 1.0
            else:
                x[i, 0][(yy - y1 - s / 2 + 0.5) ** 2 + (xx - x1 - s / 2 + 0.5) ** 2 <= (s / 2) ** 2] = 1.0
            r.append([c % classes, x1, y1, x1 + s, y1 + s])
        rows.append(r)
    return torch.from_numpy(x), pad_targets(rows)


def write_tiny_folder(root, n_train: int = 64, n_val: int = 24, classes: int = 2):
    """Write the folder; returns its path."""
    (tx, tt), (vx, vt) = _split(n_train, 0, classes), _split(n_val, 1, classes)
    names = ("square", "disc") if classes == 2 else ("object",)
    return write_yolo_folder(root, DetectionSet("tiny", tx, tt, vx, vt, names, "test"))
