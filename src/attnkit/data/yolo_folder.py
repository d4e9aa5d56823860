"""Your own detection data in the YOLO format, the layout detection users already have::

    DIR/data.yaml               names: [cat, dog]   (or a "- name" list, or "0: cat" lines)
    DIR/images/train/*.png|jpg  DIR/labels/train/<same stem>.txt
    DIR/images/val/*            DIR/labels/val/*.txt

One label line per object: ``class cx cy w h``, the class an integer id into ``names`` and the box's
centre and size as fractions of the image's width and height (each in [0, 1]). An image with no
object has an empty label file. Everything is checked before training: a malformed line, an unknown
class id, a box outside the image, a label without its image or an image without its label is a
``ValueError`` naming the file and line and saying how to fix it.

Images are read with Pillow and resized to ``size``×``size`` (normalised boxes stay valid under a
resize); all grayscale stays one channel, otherwise RGB. :func:`write_yolo_folder` writes a
:class:`~attnkit.data.detection_set.DetectionSet` in this layout (tests, or to export the generated set).

Shape legend: N images, C channels, S×S pixels after resizing, M objects per image (padded).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch

from .detection_set import DetectionSet, pad_targets

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")
SPLITS = ("train", "val")
EDGE_TOLERANCE = 1e-3  # a box may poke this far (a fraction of the image) past an edge: rounding in label tools


def _plain_names(text: str) -> list[str] | None:
    """``names:`` from simple YAML without PyYAML: a flow list, a block list or ``id: name`` lines."""
    m = re.search(r"^names:[ \t]*(.*)$", text, re.M)
    if m is None:
        return None
    inline = m.group(1).split("#")[0].strip()
    if inline.startswith("["):
        return [s.strip().strip("'\"") for s in inline.strip("[]").split(",") if s.strip()]
    names: dict[int, str] = {}
    for line in text[m.end():].splitlines():
        if line.strip() and not line.startswith((" ", "\t", "-")):
            break  # the next top-level key
        item = re.match(r"\s*(?:-\s*(.+)|(\d+)\s*:\s*(.+))$", line)
        if item:
            key = int(item.group(2)) if item.group(2) else len(names)
            names[key] = (item.group(1) or item.group(3)).split("#")[0].strip().strip("'\"")
    return [names[k] for k in sorted(names)]


def read_names(path: str | Path) -> tuple[str, ...]:
    """The class names of a ``data.yaml`` (PyYAML when installed, else the plain reader above)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: missing; a YOLO data folder needs data.yaml with the class names, e.g. 'names: [cat, dog]'")
    text = path.read_text(encoding="utf-8")
    try:
        import yaml

        names = (yaml.safe_load(text) or {}).get("names")
        if isinstance(names, dict):
            names = [names[k] for k in sorted(names)]
    except ImportError:
        names = _plain_names(text)
    if not names or not isinstance(names, list):
        raise ValueError(f"{path}: no class names found; add a line 'names: [cat, dog]' (a list, or '0: cat' lines under 'names:')")
    return tuple(str(n) for n in names)


def parse_label_line(line: str, where: str, num_classes: int) -> list[float] | None:
    """One label line → ``[class, cx, cy, w, h]`` (None for a blank line); ``where`` is 'file:line'."""
    parts = line.split()
    if not parts:
        return None
    if len(parts) != 5:
        hint = " (a segmentation polygon? this loader reads boxes only)" if len(parts) > 5 and len(parts) % 2 == 1 else ""
        raise ValueError(f"{where}: expected 5 numbers 'class cx cy w h', got {len(parts)} fields {line.strip()!r}{hint}")
    try:
        cls = int(parts[0])
        cx, cy, w, h = (float(p) for p in parts[1:])
    except ValueError:
        raise ValueError(f"{where}: expected an integer class id and four numbers, got {line.strip()!r}") from None
    if not 0 <= cls < num_classes:
        raise ValueError(f"{where}: unknown class id {cls}; data.yaml names {num_classes} classes (ids 0..{num_classes - 1})")
    t = EDGE_TOLERANCE
    if not (all(0 <= v <= 1 for v in (cx, cy, w, h)) and w > 0 and h > 0
            and cx - w / 2 >= -t and cy - h / 2 >= -t and cx + w / 2 <= 1 + t and cy + h / 2 <= 1 + t):
        raise ValueError(f"{where}: box cx={cx} cy={cy} w={w} h={h} is out of range; values are fractions of the image "
                         "in [0, 1], w and h > 0, and the box must lie inside the image (pixel labels? divide by the image size)")
    return [cls, cx, cy, w, h]


def read_labels(path: Path, num_classes: int) -> list[list[float]]:
    rows = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        row = parse_label_line(line, f"{path}:{i}", num_classes)
        if row is not None:
            rows.append(row)
    return rows


def _pairs(root: Path, split: str) -> list[tuple[Path, Path]]:
    """(image, label) paths of a split; every image has a label file and every label file an image."""
    img_dir, lab_dir = root / "images" / split, root / "labels" / split
    for d in (img_dir, lab_dir):
        if not d.is_dir():
            raise ValueError(f"{d}: missing; a YOLO data folder has images/{{train,val}} and labels/{{train,val}}")
    images = sorted(p for p in img_dir.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not images:
        raise ValueError(f"{img_dir}: no images ({', '.join(IMAGE_SUFFIXES)})")
    stems = {p.stem for p in images}
    for lab in sorted(lab_dir.glob("*.txt")):
        if lab.stem not in stems:
            raise ValueError(f"{lab}: label file without an image; expected {img_dir}/{lab.stem}.png (or .jpg); remove it or add the image")
    pairs = []
    for img in images:
        lab = lab_dir / f"{img.stem}.txt"
        if not lab.is_file():
            raise ValueError(f"{lab}: missing label file for {img}; create it (empty for an image with no objects)")
        pairs.append((img, lab))
    return pairs


def _read_split(pairs, names, size: int, limit: int | None):
    from PIL import Image

    pairs = pairs[:limit] if limit else pairs
    imgs, targets = [], []
    for img_path, lab_path in pairs:
        with Image.open(img_path) as im:
            im = im.convert("L") if im.mode in ("1", "L", "I;16", "I") else im.convert("RGB")
            imgs.append(np.asarray(im.resize((size, size), Image.BILINEAR), dtype=np.float32) / 255.0)
        rows = read_labels(lab_path, len(names))
        targets.append([[c, max(0.0, cx - w / 2) * size, max(0.0, cy - h / 2) * size, min(1.0, cx + w / 2) * size,
                         min(1.0, cy + h / 2) * size] for c, cx, cy, w, h in rows])
    return imgs, targets


def load_yolo_folder(root: str | Path, *, size: int = 96, train_limit: int | None = None, val_limit: int | None = None) -> DetectionSet:
    """The folder's train and val splits, images resized to ``size``×``size`` (a multiple of 32)."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"{root}: not a folder; give a YOLO data folder (data.yaml, images/, labels/)")
    if isinstance(size, bool) or not isinstance(size, int) or size < 32 or size % 32:
        raise ValueError(f"size must be a multiple of 32 (the detector's P5 stride), got {size!r}")
    names = read_names(root / "data.yaml")
    split = {s: _read_split(_pairs(root, s), names, size, lim) for s, lim in (("train", train_limit), ("val", val_limit))}
    gray = all(a.ndim == 2 for s in split.values() for a in s[0])
    def stack(arrs):  # (N, C, S, S): one channel when every image is grayscale
        arrs = [a if a.ndim == 3 or gray else np.repeat(a[..., None], 3, -1) for a in arrs]
        x = torch.from_numpy(np.stack(arrs))
        return x[:, None] if gray else x.permute(0, 3, 1, 2).contiguous()
    (tx, tt), (vx, vt) = split["train"], split["val"]
    return DetectionSet(root.name, stack(tx), pad_targets(tt), stack(vx), pad_targets(vt), classes=names,
                        source=f"YOLO-format folder {root}")


def write_yolo_folder(root: str | Path, data: DetectionSet) -> Path:
    """Write ``data`` as a YOLO folder (PNG images, normalised labels, data.yaml); returns ``root``."""
    from PIL import Image

    root = Path(root)
    names = ", ".join(data.classes)
    root.mkdir(parents=True, exist_ok=True)
    (root / "data.yaml").write_text(f"path: .\ntrain: images/train\nval: images/val\nnames: [{names}]\n", encoding="utf-8")
    for split, xs, ts in (("train", data.train_x, data.train_t), ("val", data.val_x, data.val_t)):
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        for i, (x, t) in enumerate(zip(xs, ts)):
            H, W = x.shape[1:]
            arr = (x.clamp(0, 1) * 255).round().byte().permute(1, 2, 0).numpy()
            Image.fromarray(arr[..., 0] if arr.shape[-1] == 1 else arr).save(root / "images" / split / f"{i:05d}.png")
            lines = [f"{int(c)} {(x1 + x2) / 2 / W:.6f} {(y1 + y2) / 2 / H:.6f} {(x2 - x1) / W:.6f} {(y2 - y1) / H:.6f}"
                     for c, x1, y1, x2, y2 in t.tolist() if c >= 0]
            (root / "labels" / split / f"{i:05d}.txt").write_text("\n".join(lines) + ("\n" if lines else ""), encoding="utf-8")
    return root


__all__ = ["load_yolo_folder", "write_yolo_folder", "read_names", "parse_label_line", "read_labels"]
