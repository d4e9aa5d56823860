"""Where the report finds committed benchmark results: ``benchmarks/results/`` of a source checkout.

The long benchmarks (tens of minutes) are not rerun by ``attnkit report``; their committed JSON and
PNG are quoted next to the quick measurements. In a wheel install the folder is absent and those
parts are left out.
"""

from __future__ import annotations

from pathlib import Path

RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results"


def committed(name: str) -> Path | None:
    """``benchmarks/results/<name>`` when it exists, else None."""
    path = RESULTS / name
    return path if path.exists() else None
