"""Offline image classification data: Fashion-MNIST from Debian, scikit-learn's digits as fallback.

* **Fashion-MNIST** (Xiao, Rasul & Vollgraf 2017, https://arxiv.org/abs/1708.07747): 60,000 training
  and 10,000 test 28×28 grayscale images of 10 clothing classes, read from the IDX files of the
  Debian package ``dataset-fashion-mnist`` (``/usr/share/datasets/fashion-mnist/*-ubyte.gz``).
* **digits** (scikit-learn's ``load_digits``, the UCI optical handwritten digits): 1,797 8×8
  images of 0–9, installed with scikit-learn; split here 1,437 train / 360 test (seeded).

``load_images("auto")`` takes Fashion-MNIST when its files exist and otherwise digits, with a
``notice`` saying so (experiments print it and write it to their JSON); asking for
``"fashion-mnist"`` explicitly when the package is missing raises
:class:`~attnkit.data.MissingData` naming the package and the command that installs it.

Shape legend: N images, H×W pixels; images are float32 in [0, 1], shaped (N, 1, H, W).
"""

from __future__ import annotations

import gzip
import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from ._missing import MissingData

FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
FASHION_MNIST_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)
DATASETS = ("auto", "fashion-mnist", "digits")
_IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


@dataclass(frozen=True)
class ImageSet:
    """A train/test split: ``train_x`` (N, 1, H, W) float32 in [0, 1], ``train_y`` (N,) int64, same for test."""

    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    classes: tuple[str, ...]
    source: str
    notice: str | None = None

    @property
    def image_size(self) -> tuple[int, int]:
        return tuple(self.train_x.shape[2:])

    def describe(self) -> dict:
        """JSON-able summary for results files."""
        return {
            "name": self.name, "source": self.source, "notice": self.notice, "image_size": list(self.image_size),
            "train": int(self.train_x.shape[0]), "test": int(self.test_x.shape[0]), "classes": list(self.classes),
        }


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file (LeCun's MNIST format, gzipped or not): magic 0x0000TTDD — TT the element
    type, DD the number of dimensions — then DD big-endian uint32 sizes, then the data."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"{path} is not an IDX file (bad magic {raw[:4].hex()}); expected 0x0000TTDD")
    code, ndim = raw[2], raw[3]
    if code not in _IDX_TYPES:
        raise ValueError(f"{path}: unknown IDX element type 0x{code:02x}")
    dims = struct.unpack(f">{ndim}I", raw[4 : 4 + 4 * ndim])
    dtype = np.dtype(_IDX_TYPES[code])
    count = int(np.prod(dims)) if dims else 1
    body = raw[4 + 4 * ndim :]
    if len(body) != count * dtype.itemsize:
        raise ValueError(f"{path}: header says {dims} ({count * dtype.itemsize} bytes) but the file holds {len(body)}; the file is truncated")
    return np.frombuffer(body, dtype=dtype).reshape(dims)


def fashion_mnist_available(root: str | Path | None = None) -> bool:
    root = Path(root) if root is not None else FASHION_MNIST_DIR
    return all((root / f).is_file() for pair in FASHION_MNIST_FILES.values() for f in pair)


@lru_cache(maxsize=2)
def _fashion_arrays(root: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    return {split: (read_idx(Path(root) / img), read_idx(Path(root) / lab)) for split, (img, lab) in FASHION_MNIST_FILES.items()}


def _subset(x: torch.Tensor, y: torch.Tensor, limit: int | None, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded random subset (the files are not shuffled class by class, but a prefix is a biased sample)."""
    if limit is None or limit >= x.shape[0]:
        return x, y
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive int or None, got {limit!r}")
    idx = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(seed))[:limit]
    return x[idx], y[idx]


def load_fashion_mnist(root: str | Path | None = None, *, train_limit: int | None = None, test_limit: int | None = None) -> ImageSet:
    """Fashion-MNIST from the Debian IDX files; ``*_limit`` take seeded random subsets."""
    root = Path(root) if root is not None else FASHION_MNIST_DIR
    if not fashion_mnist_available(root):
        raise MissingData(
            f"Fashion-MNIST (the Debian package dataset-fashion-mnist; no IDX files under {root})",
            install="sudo apt-get install dataset-fashion-mnist",
            fallback="scikit-learn's digits with load_images('auto') or --data auto",
        )
    arrays = _fashion_arrays(str(root))
    parts = []
    for split, limit, seed in (("train", train_limit, 0), ("test", test_limit, 1)):
        img, lab = arrays[split]
        x = torch.from_numpy(img.astype(np.float32) / 255.0).unsqueeze(1)  # (N, 1, 28, 28)
        y = torch.from_numpy(lab.astype(np.int64))
        parts += _subset(x, y, limit, seed)
    return ImageSet("fashion-mnist", *parts, FASHION_MNIST_CLASSES, f"Debian dataset-fashion-mnist ({root})")


def load_digits_images(*, train_limit: int | None = None, test_limit: int | None = None, notice: str | None = None) -> ImageSet:
    """scikit-learn's 8×8 digits (pixel values 0–16 scaled to [0, 1]), a seeded 80/20 split."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:  # pragma: no cover - scikit-learn is an experiments extra
        raise MissingData("scikit-learn digits", install="pip install scikit-learn") from e
    d = load_digits()
    x = torch.from_numpy(d.images.astype(np.float32) / 16.0).unsqueeze(1)  # (1797, 1, 8, 8)
    y = torch.from_numpy(d.target.astype(np.int64))
    perm = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(0))
    n_train = int(round(0.8 * x.shape[0]))
    tr, te = perm[:n_train], perm[n_train:]
    train = _subset(x[tr], y[tr], train_limit, 0)
    test = _subset(x[te], y[te], test_limit, 1)
    return ImageSet("digits", *train, *test, tuple(str(i) for i in range(10)), "scikit-learn load_digits", notice)


def load_images(name: str = "auto", *, root: str | Path | None = None, train_limit: int | None = None, test_limit: int | None = None) -> ImageSet:
    """``"fashion-mnist"`` (error when missing), ``"digits"``, or ``"auto"`` (Fashion-MNIST, else digits
    with a notice)."""
    if name not in DATASETS:
        raise ValueError(f"unknown image data set {name!r}; valid names: {', '.join(DATASETS)}")
    if name == "fashion-mnist" or (name == "auto" and fashion_mnist_available(root)):
        return load_fashion_mnist(root, train_limit=train_limit, test_limit=test_limit)
    notice = None
    if name == "auto":
        notice = (
            f"Fashion-MNIST is not installed (no IDX files under {root or FASHION_MNIST_DIR}); using scikit-learn's "
            "8x8 digits instead. Install it with: sudo apt-get install dataset-fashion-mnist"
        )
    return load_digits_images(train_limit=train_limit, test_limit=test_limit, notice=notice)


__all__ = [
    "DATASETS", "FASHION_MNIST_CLASSES", "FASHION_MNIST_DIR", "ImageSet", "fashion_mnist_available",
    "load_digits_images", "load_fashion_mnist", "load_images", "read_idx",
]
