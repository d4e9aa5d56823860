"""Atomic file writes: write to a temporary file in the same folder, fsync, then rename.

``os.replace`` within one folder is atomic on POSIX and Windows, so a reader (or a run resumed after
``kill -9``) sees either the old file or the new one, never half of one. A crash leaves at most a
``.*.tmp-*`` file behind, which :func:`remove_stale_temporaries` clears.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Callable

_TMP = ".tmp-"


def write_atomic(path: str | Path, write: Callable[[Any], None], *, binary: bool = True) -> Path:
    """Call ``write(file_object)`` on a temporary sibling of ``path``, then rename it onto ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}{_TMP}{os.getpid()}")
    try:
        with open(tmp, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():  # write failed: do not leave the half-written file
            tmp.unlink()
    return path


def remove_stale_temporaries(folder: str | Path) -> None:
    """Delete temporary files a killed process left in ``folder`` (not recursive). A temporary whose
    writer is still alive is kept: two processes may share an output folder (a second worker
    training other models of the same run), and deleting one's file mid-write would crash it."""
    folder = Path(folder)
    if folder.is_dir():
        for p in folder.glob(f".*{_TMP}*"):
            if not _writer_alive(p):
                p.unlink(missing_ok=True)


def _writer_alive(tmp: Path) -> bool:
    """Whether the process that names ``tmp`` (``.NAME.tmp-PID``) is still running on this machine."""
    pid = tmp.name.rsplit(_TMP, 1)[-1]
    if not pid.isdigit() or int(pid) == os.getpid():
        return False  # this process writes one file at a time: a temporary of its own is a leftover
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    return True


def to_jsonable(obj: Any) -> Any:
    """Convert numpy/torch scalars and arrays, paths, tuples and sets to JSON types; NaN/inf to None
    (JSON has no NaN)."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "tolist"):  # numpy arrays/scalars, torch tensors
        return to_jsonable(obj.tolist())
    if hasattr(obj, "item"):
        return to_jsonable(obj.item())
    raise TypeError(f"cannot write {type(obj).__name__} to JSON ({obj!r:.80}); convert it to numbers, strings, lists or dicts")


def save_json(path: str | Path, obj: Any) -> Path:
    text = json.dumps(to_jsonable(obj), indent=1, ensure_ascii=False, allow_nan=False)
    return write_atomic(path, lambda f: f.write(text + "\n"), binary=False)


def save_torch(path: str | Path, obj: Any) -> Path:
    import torch

    return write_atomic(path, lambda f: torch.save(obj, f))
