"""Where the report finds committed benchmark results: a folder given explicitly.

The long benchmarks (tens of minutes) are not rerun by ``attnkit report``; their committed JSON and
PNG (``benchmarks/results/`` of a source checkout) are quoted next to the quick measurements. The
folder is passed in (``attnkit report`` uses ``benchmarks/results`` of the current folder, i.e. a
checkout); nothing is looked up relative to the installed package, so a wheel install simply has
no such folder and those parts are left out.
"""

from __future__ import annotations

from pathlib import Path


def committed(name: str, root: str | Path | None) -> Path | None:
    """``root/<name>`` when ``root`` is given and the file exists, else None."""
    if root is None:
        return None
    path = Path(root) / name
    return path if path.is_file() else None
