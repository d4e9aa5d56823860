"""The YOLO-format loader: a written folder reads back the same boxes, data.yaml's three spellings of
``names:`` parse with and without PyYAML, and every malformed input is an error naming its file and
line."""

from __future__ import annotations

import builtins

import pytest
import torch

from attnkit.data.detection_set import DetectionSet, pad_targets, unpad
from attnkit.data.yolo_folder import _plain_names, load_yolo_folder, read_names, write_yolo_folder

pytest.importorskip("PIL", reason="enable with: pip install pillow")


def _tiny_set(n=3, size=64) -> DetectionSet:
    x = torch.zeros(n, 1, size, size)
    rows = []
    for i in range(n):
        x1, y1 = 4 + 8 * i, 6 + 4 * i
        x[i, 0, y1:y1 + 20, x1:x1 + 16] = 1.0
        rows.append([[i % 2, x1, y1, x1 + 16, y1 + 20]] + ([[1, 40, 40, 60, 52]] if i == 0 else []))
    rows[-1] = []  # an image with no object: an empty label file
    t = pad_targets(rows)
    return DetectionSet("tiny", x, t, x.clone(), t.clone(), ("cat", "dog"), "test")


@pytest.fixture
def folder(tmp_path):
    return write_yolo_folder(tmp_path / "data", _tiny_set())


def test_written_folder_reads_back_the_same_boxes(folder):
    d = load_yolo_folder(folder, size=64)
    ref = _tiny_set()
    assert d.classes == ("cat", "dog") and d.train_x.shape == (3, 1, 64, 64)
    torch.testing.assert_close(d.train_x, ref.train_x)
    for got, want in zip(unpad(d.val_t), unpad(ref.val_t)):
        torch.testing.assert_close(got, want, atol=1e-3, rtol=0)  # six decimals of a fraction of 64 px
    assert len(unpad(d.train_t)[-1]) == 0


def test_resizing_scales_the_boxes(folder):
    d = load_yolo_folder(folder, size=128)
    got, want = unpad(d.train_t)[0], unpad(_tiny_set().train_t)[0]
    assert torch.equal(got[:, 0], want[:, 0])
    torch.testing.assert_close(got[:, 1:], 2 * want[:, 1:], atol=2e-3, rtol=0)


@pytest.mark.parametrize("text", ["names: [cat, dog]\n", "names:\n  - cat\n  - dog\nnc: 2\n", "nc: 2\nnames:\n  0: cat\n  1: 'dog'\n"])
def test_names_parse_with_and_without_pyyaml(tmp_path, monkeypatch, text):
    (tmp_path / "data.yaml").write_text(text)
    assert read_names(tmp_path / "data.yaml") == ("cat", "dog")
    assert _plain_names(text) == ["cat", "dog"]
    real_import = builtins.__import__
    monkeypatch.setattr(builtins, "__import__", lambda name, *a, **k: (_ for _ in ()).throw(ImportError(name)) if name == "yaml" else real_import(name, *a, **k))
    assert read_names(tmp_path / "data.yaml") == ("cat", "dog")


def _label(folder, line: str, name="00001.txt"):
    (folder / "labels" / "train" / name).write_text(f"0 0.5 0.5 0.2 0.2\n{line}\n")
    return folder / "labels" / "train" / name


@pytest.mark.parametrize("line, match", [
    ("0 0.5 0.5 0.2", r"expected 5 numbers"),
    ("0 0.1 0.1 0.2 0.2 0.3 0.3", r"segmentation polygon"),
    ("cat 0.5 0.5 0.2 0.2", r"integer class id"),
    ("2 0.5 0.5 0.2 0.2", r"unknown class id 2; data.yaml names 2 classes"),
    ("0 1.5 0.5 0.2 0.2", r"out of range"),
    ("0 0.05 0.5 0.2 0.2", r"out of range"),
    ("0 0.5 0.5 0 0.2", r"out of range"),
])
def test_bad_label_lines_name_the_file_and_line(folder, line, match):
    path = _label(folder, line)
    with pytest.raises(ValueError, match=match) as e:
        load_yolo_folder(folder, size=64)
    assert f"{path}:2" in str(e.value)


def test_missing_files_are_named(folder):
    (folder / "labels" / "train" / "00001.txt").unlink()
    with pytest.raises(ValueError, match=r"00001\.txt: missing label file .*empty for an image with no objects"):
        load_yolo_folder(folder, size=64)
    (folder / "labels" / "train" / "00001.txt").write_text("")
    (folder / "labels" / "train" / "stray.txt").write_text("")
    with pytest.raises(ValueError, match=r"stray\.txt: label file without an image"):
        load_yolo_folder(folder, size=64)
    (folder / "labels" / "train" / "stray.txt").unlink()
    (folder / "data.yaml").unlink()
    with pytest.raises(ValueError, match=r"data\.yaml: missing"):
        load_yolo_folder(folder, size=64)


def test_missing_split_and_bad_size(tmp_path, folder):
    with pytest.raises(ValueError, match="not a folder"):
        load_yolo_folder(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="multiple of 32"):
        load_yolo_folder(folder, size=50)
    import shutil

    shutil.rmtree(folder / "images" / "val")
    with pytest.raises(ValueError, match=r"images/val: missing"):
        load_yolo_folder(folder, size=64)


def test_yaml_without_names(tmp_path):
    (tmp_path / "data.yaml").write_text("nc: 2\n")
    with pytest.raises(ValueError, match="no class names"):
        read_names(tmp_path / "data.yaml")
