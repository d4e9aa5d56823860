"""Any folder of images with one sub-folder per class (``vision --data PATH``), read with Pillow.

::

    PATH/
      cat/  001.png  002.jpg …
      dog/  a.png …

Class names are the sub-folder names, sorted (their order gives the label ids). Every file with an
image suffix (:data:`IMAGE_SUFFIXES`) is read with Pillow, converted to one colour mode for the
whole set — grayscale ``"L"`` when every image is grayscale, else ``"RGB"`` (``mode="auto"``), or
the mode asked for — and resized to ``size`` (height, width) with bilinear filtering, so images of
any size and format mix. Files of other suffixes and hidden files are skipped. The split is
stratified and seeded: each class gives ``test_fraction`` of its images (at least one when it has
two or more) to the test set, so every class is in training and a re-run splits the same way.

Everything wrong with the folder is a ValueError naming what was found and the fix: a missing
path, a file instead of a folder, no class sub-folders, a class folder without images, a single
class (nothing to tell apart), and a file Pillow cannot read (named, with Pillow's reason).

Shape legend: N images, C channels (1 or 3), H×W pixels; images are float32 in [0, 1], (N, C, H, W).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from .images import ImageSet, _subset

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")
MODES = ("auto", "L", "RGB")
GRAY_MODES = ("1", "L", "LA", "I", "I;16", "F")


def class_files(root: str | os.PathLike) -> dict[str, list[Path]]:
    """``{class name: sorted image paths}``; raises a ValueError for any unusable folder layout."""
    p = Path(root)
    layout = "one sub-folder per class holding that class's images, e.g. PATH/cat/1.png, PATH/dog/2.png"
    if not p.exists():
        raise ValueError(f"--data {str(p)!r}: no such folder; give a folder with {layout}")
    if not p.is_dir():
        raise ValueError(f"--data {str(p)!r} is a file, not a folder; give a folder with {layout}")
    subdirs = sorted(d for d in p.iterdir() if d.is_dir() and not d.name.startswith("."))
    if not subdirs:
        raise ValueError(f"--data {str(p)!r} holds no class sub-folders (the folder is empty or holds only files); give a folder with {layout}")
    out = {}
    for d in subdirs:
        files = sorted(f for f in d.iterdir() if f.is_file() and not f.name.startswith(".") and f.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise ValueError(f"class folder {str(d)!r} holds no images (suffixes {', '.join(IMAGE_SUFFIXES)}); "
                             "add images to it or remove the folder")
        out[d.name] = files
    if len(out) < 2:
        raise ValueError(f"--data {str(p)!r} has a single class ({next(iter(out))!r}); a classifier needs at least two class "
                         "sub-folders — add another class folder")
    return out


def _open(path: Path):
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im.load()
            return im.copy()
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise ValueError(f"cannot read image {str(path)!r} with Pillow ({e}); fix or remove the file") from e


def _to_array(im, mode: str, size: tuple[int, int]) -> np.ndarray:
    """(C, H, W) float32 in [0, 1]."""
    from PIL import Image

    if im.mode != mode:
        im = im.convert(mode)
    im = im.resize((size[1], size[0]), Image.BILINEAR)  # Pillow takes (width, height)
    a = np.asarray(im, dtype=np.float32) / 255.0
    return a[None] if a.ndim == 2 else a.transpose(2, 0, 1)


def load_image_folder(root: str | os.PathLike, *, size: tuple[int, int] | int = 32, mode: str = "auto", test_fraction: float = 0.2,
                      seed: int = 0, train_limit: int | None = None, test_limit: int | None = None) -> ImageSet:
    """The folder as a train/test :class:`~attnkit.data.images.ImageSet` ((N, C, H, W), C = 1 or 3)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {list(MODES)}, got {mode!r}")
    size = (size, size) if isinstance(size, int) and not isinstance(size, bool) else tuple(size)
    if len(size) != 2 or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 4 for s in size):
        raise ValueError(f"size must be an int or (height, width) of ints >= 4, got {size!r}")
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    files = class_files(root)
    images = {c: [_open(f) for f in fs] for c, fs in files.items()}
    if mode == "auto":
        mode = "L" if all(im.mode in GRAY_MODES for ims in images.values() for im in ims) else "RGB"
    gen = torch.Generator().manual_seed(seed)
    parts: dict[str, list] = {"train": [], "test": []}
    for label, (c, ims) in enumerate(images.items()):
        x = np.stack([_to_array(im, mode, size) for im in ims])
        perm = torch.randperm(len(ims), generator=gen).tolist()
        n_test = max(1, round(test_fraction * len(ims))) if len(ims) >= 2 else 0
        for split, idx in (("test", perm[:n_test]), ("train", perm[n_test:])):
            parts[split] += [(x[i], label) for i in idx]
    tensors = []
    for split, limit, s in (("train", train_limit, 0), ("test", test_limit, 1)):
        x = torch.from_numpy(np.stack([a for a, _ in parts[split]])) if parts[split] else torch.zeros(0, 1 if mode == "L" else 3, *size)
        y = torch.tensor([lab for _, lab in parts[split]], dtype=torch.int64)
        tensors += _subset(x, y, limit, s)
    name = Path(root).resolve().name or str(root)
    return ImageSet(f"folder:{name}", *tensors, tuple(files), f"image folder {root} ({mode}, resized to {size[0]}x{size[1]})")
