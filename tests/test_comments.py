"""Comments and docstrings say what the code does and why, for a user who has only this repository:
no references to the project's issue tracker, to files outside the repository, or to where code used
to live."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("src", "benchmarks", "tests", "examples")
FORBIDDEN = {
    "an issue number": re.compile(r"\b[Ii]ssues? #?\d+\b"),
    "a path outside the repository": re.compile(r"\.\./shared|/work/shared"),
    "where the code came from": re.compile(r"\b[Ss]plit out of\b"),
}


def _sources() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py") if p.resolve() != Path(__file__).resolve())


@pytest.mark.skipif(not (ROOT / "src").is_dir(), reason="needs a source checkout")
def test_no_comment_points_outside_the_repository_or_narrates_history():
    found = []
    for path in _sources():
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            found += [f"{path.relative_to(ROOT)}:{i}: {what}" for what, pattern in FORBIDDEN.items() if pattern.search(line)]
    assert found == [], "\n".join(found)


def test_the_patterns_catch_what_they_are_for():
    assert FORBIDDEN["an issue number"].search("# issue 8 item 2: the padded tail")
    assert FORBIDDEN["a path outside the repository"].search("see ../shared/PERF-NOTES.md")
    assert FORBIDDEN["where the code came from"].search("Split out of attnkit.modules.cache")
    assert not any(p.search("# the tissue 3 sample") for p in FORBIDDEN.values())
