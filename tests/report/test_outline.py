"""``attnkit report`` shows the content it was reviewed with: the tiny report's sections, headings,
sub-headings, folded parts and figures (``report_outline.json``, written by ``_outline.py``) in
English and Chinese.

The committed runs are limited to those the fixture was written with (runs committed later add their
own sub-headings and figures). After a deliberate change of the page, rewrite the fixture with
``python tests/report/_outline.py tests/report/report_outline.json`` and review its diff.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _outline import committed_copy, outline, tiny_report_outline

ROOT = Path(__file__).resolve().parents[2]
WANT = json.loads((Path(__file__).with_name("report_outline.json")).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def got(tmp_path_factory):
    d = tmp_path_factory.mktemp("outline")
    committed = committed_copy(ROOT / "results", WANT["committed_runs"], d / "results")
    return tiny_report_outline(d / "report", d / "no-runs", ROOT / "benchmarks" / "results", committed)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_report_outline_is_unchanged(got, lang):
    assert [s["id"] for s in got[lang]] == [s["id"] for s in WANT[lang]]
    for have, want in zip(got[lang], WANT[lang]):
        assert have == want, have["id"]


def test_the_outline_sees_headings_and_figures():
    page = ('<section id="a" data-section="a" data-failed="0"><h2>A &amp; b</h2><h3>one</h3><img alt="fig 1" src="x">'
            '<svg></svg><iframe></iframe><details><summary>More <code>x</code></summary><p>…</p></details></section>'
            '<section id="b" data-section="b" data-failed="1"><h2>B</h2></section>')
    assert outline(page) == [
        {"id": "a", "failed": False, "heading": "A & b", "subheadings": ["one"], "folded": ["More x"], "images": ["fig 1"],
         "svg": 1, "iframes": 1},
        {"id": "b", "failed": True, "heading": "B", "subheadings": [], "folded": [], "images": [], "svg": 0, "iframes": 0}]
