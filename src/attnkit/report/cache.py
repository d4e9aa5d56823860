"""Section cache: a section's numbers are reused while its inputs and its code are unchanged.

The key of a section is a SHA-256 over (its id, its inputs as canonical JSON, the source text of
the modules that compute it, the torch version). The cached value is the JSON the section's
``compute`` returned; files it wrote live in its own folder and are checked to exist. A failed
section is never cached, so the next run retries it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import torch

from ..experiments.lab.atomic import save_json

CACHE_DIR = ".cache"


def source_hash(modules: tuple[str, ...] | list[str]) -> str:
    """SHA-256 of the source files of ``modules`` (dotted names); a module without a file hashes its name."""
    h = hashlib.sha256()
    for name in sorted(modules):
        spec = importlib.util.find_spec(name)
        origin = getattr(spec, "origin", None) if spec else None
        h.update(name.encode())
        if origin and Path(origin).is_file():
            h.update(Path(origin).read_bytes())
    return h.hexdigest()


def file_hash(path: str | Path | None) -> str | None:
    if path is None or not Path(path).is_file():
        return None
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def section_key(section_id: str, inputs: dict, modules: tuple[str, ...] | list[str]) -> str:
    blob = json.dumps({"id": section_id, "inputs": inputs, "torch": torch.__version__}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode() + source_hash(modules).encode()).hexdigest()


def load(out: Path, section_id: str, key: str) -> dict | None:
    """The cached data of ``section_id`` when its key matches and the files it names still exist."""
    path = Path(out) / CACHE_DIR / f"{section_id}.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("key") != key:
        return None
    if not all(Path(out, f).exists() for f in doc.get("files", [])):
        return None  # someone removed a figure: compute again
    return doc.get("data")


def store(out: Path, section_id: str, key: str, data: dict, files: list[str]) -> None:
    save_json(Path(out) / CACHE_DIR / f"{section_id}.json", {"key": key, "files": files, "data": data})
