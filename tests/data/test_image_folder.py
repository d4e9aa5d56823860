"""Image folders (``vision --data PATH``): pixels read back exactly as written (checked against the
NumPy arrays the PNGs were made from), grayscale vs RGB chosen consistently, resizing to one size,
a stratified seeded split, and one ValueError naming the problem for a missing path, a file, an
empty folder, a class without images, a single class and an unreadable image."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from attnkit.data.image_folder import class_files, load_image_folder


def _write(root, cls, name, array, mode=None):
    d = root / cls
    d.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array, mode).save(d / name)
    return d / name


def _gray_folder(root, n=5, size=8):
    rng = np.random.default_rng(0)
    arrays = {}
    for cls in ("circle", "square"):
        for i in range(n):
            a = rng.integers(0, 256, (size, size), dtype=np.uint8)
            arrays[(cls, i)] = a
            _write(root, cls, f"{i}.png", a)
    return arrays


def test_gray_pixels_labels_and_split(tmp_path):
    arrays = _gray_folder(tmp_path)
    data = load_image_folder(tmp_path, size=8, test_fraction=0.2, seed=0)
    assert data.classes == ("circle", "square")
    assert data.train_x.shape == (8, 1, 8, 8) and data.test_x.shape == (2, 1, 8, 8)
    assert sorted(data.test_y.tolist()) == [0, 1]  # stratified: one test image per class
    expected = {a.tobytes() for a in arrays.values()}
    got = {(np.round(x[0].numpy() * 255).astype(np.uint8)).tobytes() for x in list(data.train_x) + list(data.test_x)}
    assert got == expected  # same size: bilinear resizing leaves the pixels unchanged
    # every image keeps its label
    by_bytes = {a.tobytes(): cls for (cls, _), a in arrays.items()}
    for x, y in zip(list(data.train_x) + list(data.test_x), data.train_y.tolist() + data.test_y.tolist()):
        assert by_bytes[(np.round(x[0].numpy() * 255).astype(np.uint8)).tobytes()] == data.classes[y]
    again = load_image_folder(tmp_path, size=8, seed=0)
    assert np.array_equal(again.test_x.numpy(), data.test_x.numpy())


def test_mixed_modes_become_rgb_and_sizes_are_unified(tmp_path):
    _write(tmp_path, "a", "g.png", np.full((10, 6), 200, np.uint8))
    _write(tmp_path, "a", "g2.jpg", np.full((5, 5), 10, np.uint8))
    _write(tmp_path, "b", "c.png", np.dstack([np.full((7, 9), v, np.uint8) for v in (255, 0, 0)]))
    _write(tmp_path, "b", "c2.png", np.dstack([np.full((7, 9), v, np.uint8) for v in (0, 0, 255)]))
    data = load_image_folder(tmp_path, size=(12, 16))
    x = np.concatenate([data.train_x.numpy(), data.test_x.numpy()])
    assert x.shape[1:] == (3, 12, 16) and x.dtype == np.float32 and 0 <= x.min() and x.max() <= 1
    assert any(np.allclose(img[:, 0, 0], [1, 0, 0]) for img in x)  # red stays red
    assert any(np.allclose(img, 200 / 255, atol=1e-6) for img in x)  # a gray image becomes three equal channels
    assert load_image_folder(tmp_path, size=8, mode="L").train_x.shape[1] == 1


def test_hidden_and_non_image_files_are_skipped(tmp_path):
    _gray_folder(tmp_path, n=2)
    (tmp_path / "circle" / "notes.txt").write_text("not an image")
    (tmp_path / "circle" / ".DS_Store").write_bytes(b"\0")
    (tmp_path / ".cache").mkdir()
    assert {k: len(v) for k, v in class_files(tmp_path).items()} == {"circle": 2, "square": 2}


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="no such folder"):
        load_image_folder(tmp_path / "nope")
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        load_image_folder(tmp_path / "f.txt")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no class sub-folders"):
        load_image_folder(empty)
    one = tmp_path / "one"
    _write(one, "cat", "1.png", np.zeros((4, 4), np.uint8))
    with pytest.raises(ValueError, match="single class .*'cat'"):
        load_image_folder(one)
    (one / "dog").mkdir()
    with pytest.raises(ValueError, match="dog.*holds no images"):
        load_image_folder(one)
    _write(one, "dog", "1.png", np.zeros((4, 4), np.uint8))
    (one / "dog" / "broken.png").write_bytes(b"not a png at all")
    with pytest.raises(ValueError, match="cannot read image .*broken.png"):
        load_image_folder(one)


@pytest.mark.parametrize("kwargs, word", [({"mode": "CMYK"}, "mode"), ({"size": 2}, "size"), ({"test_fraction": 1.0}, "test_fraction")])
def test_bad_arguments(tmp_path, kwargs, word):
    _gray_folder(tmp_path, n=2)
    with pytest.raises(ValueError, match=word):
        load_image_folder(tmp_path, **kwargs)
