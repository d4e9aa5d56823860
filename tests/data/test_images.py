"""Image data: the IDX reader against hand-made files, Fashion-MNIST from Debian, digits fallback."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest
import torch

from attnkit.data import MissingData
from attnkit.data.images import fashion_mnist_available, load_digits_images, load_fashion_mnist, load_images, read_idx

needs_fmnist = pytest.mark.skipif(not fashion_mnist_available(), reason="Debian package dataset-fashion-mnist not installed")


def write_idx(path, arr: np.ndarray, code: int = 0x08, compress: bool = True) -> None:
    raw = bytes([0, 0, code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.tobytes()
    (gzip.open if compress else open)(path, "wb").write(raw)


@pytest.mark.parametrize("compress", [True, False])
def test_idx_reader_round_trips(tmp_path, compress):
    arr = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    p = tmp_path / ("a.gz" if compress else "a")
    write_idx(p, arr, compress=compress)
    np.testing.assert_array_equal(read_idx(p), arr)
    big = np.array([1, -2, 300], dtype=">i4")
    write_idx(tmp_path / "b.gz", big, code=0x0C)
    np.testing.assert_array_equal(read_idx(tmp_path / "b.gz"), [1, -2, 300])


def test_idx_reader_rejects_bad_files(tmp_path):
    (tmp_path / "x").write_bytes(b"\x01\x02\x08\x01abcd")
    with pytest.raises(ValueError, match="not an IDX file"):
        read_idx(tmp_path / "x")
    arr = np.zeros((4, 4), dtype=np.uint8)
    raw = bytes([0, 0, 8, 2]) + struct.pack(">2I", 4, 4) + arr.tobytes()[:10]
    (tmp_path / "t").write_bytes(raw)
    with pytest.raises(ValueError, match="truncated"):
        read_idx(tmp_path / "t")


def test_explicit_fashion_mnist_when_missing_names_the_package(tmp_path):
    with pytest.raises(MissingData, match="dataset-fashion-mnist") as e:
        load_images("fashion-mnist", root=tmp_path)
    assert "apt-get install dataset-fashion-mnist" in str(e.value)


def test_auto_falls_back_to_digits_with_a_notice(tmp_path):
    d = load_images("auto", root=tmp_path)
    assert d.name == "digits" and "dataset-fashion-mnist" in d.notice
    assert d.train_x.shape == (1438, 1, 8, 8) and d.test_x.shape == (359, 1, 8, 8)
    assert float(d.train_x.max()) == 1.0 and float(d.train_x.min()) == 0.0
    assert set(d.train_y.tolist()) == set(range(10))
    assert d.describe()["notice"] == d.notice


def test_digits_split_is_disjoint_and_seeded():
    a, b = load_digits_images(), load_digits_images()
    assert torch.equal(a.train_x, b.train_x)
    train = {t.numpy().tobytes() for t in a.train_x}
    assert sum(t.numpy().tobytes() in train for t in a.test_x) < 5  # the UCI set has a few duplicate images
    assert load_digits_images(train_limit=100).train_x.shape[0] == 100


def test_unknown_name_lists_the_valid_ones():
    with pytest.raises(ValueError, match="auto, fashion-mnist, digits"):
        load_images("mnist")


@needs_fmnist
def test_fashion_mnist_from_debian():
    d = load_fashion_mnist()
    assert d.train_x.shape == (60000, 1, 28, 28) and d.test_x.shape == (10000, 1, 28, 28)
    assert d.train_x.dtype == torch.float32 and 0.0 <= float(d.train_x.min()) and float(d.train_x.max()) <= 1.0
    assert torch.bincount(d.train_y).tolist() == [6000] * 10  # the data set's published balance
    assert torch.bincount(d.test_y).tolist() == [1000] * 10
    assert d.classes[9] == "Ankle boot" and load_images("auto").name == "fashion-mnist"
    small = load_fashion_mnist(train_limit=500, test_limit=100)
    assert small.train_x.shape[0] == 500 and small.test_x.shape[0] == 100
    assert len(set(small.train_y.tolist())) == 10  # a random subset, not the files' first 500
