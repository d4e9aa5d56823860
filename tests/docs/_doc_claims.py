"""Reading a committed JSON and checking that a page of the docs says what it says.

The measured numbers live in docs/performance.md (benchmarks) and docs/results.md (experiment runs),
each rebuilt from the committed JSON by the tests beside this file; the README only links them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "results"
PERFORMANCE = ROOT / "docs" / "performance.md"
RESULTS = ROOT / "docs" / "results.md"


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def says(page: Path, *claims: str) -> None:
    """Each claim appears on ``page`` (line breaks in its prose count as spaces)."""
    flat = re.sub(r"\s+", " ", page.read_text(encoding="utf-8"))
    missing = [c for c in claims if c not in flat]
    assert not missing, f"{page.relative_to(ROOT)} lacks (or says otherwise than the JSON): " + " | ".join(missing)
