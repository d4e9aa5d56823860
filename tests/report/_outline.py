"""The outline of a report page: per section its id, heading, sub-headings, the titles of its folded
parts (``<details>`` summaries) and figures (image alt texts, inline SVG and iframe counts). Two pages with the same outline show the same content in the
same place; the numbers inside may differ from run to run.

``python tests/report/_outline.py OUT.json`` writes the outline of a tiny report (en and zh) run
with the code on ``sys.path``; ``report_outline.json`` beside this file was written that way.
"""

from __future__ import annotations

import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path


class _Outline(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.sections: list[dict] = []
        self._in: str | None = None  # "h2", "h3" or "summary" while inside one of the current section
        self._text = ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section" and "data-section" in a:
            self.sections.append({"id": a["data-section"], "failed": a.get("data-failed") == "1", "heading": "",
                                  "subheadings": [], "folded": [], "images": [], "svg": 0, "iframes": 0})
        elif not self.sections:
            return
        elif tag in ("h2", "h3", "summary"):
            self._in, self._text = tag, ""
        elif tag == "img":
            self.sections[-1]["images"].append(a.get("alt", ""))
        elif tag == "svg":
            self.sections[-1]["svg"] += 1
        elif tag == "iframe":
            self.sections[-1]["iframes"] += 1

    def handle_data(self, data):
        if self._in:
            self._text += data

    def handle_endtag(self, tag):
        if self._in == tag and self.sections:
            text = re.sub(r"\s+", " ", self._text).strip()
            if tag == "h2":
                self.sections[-1]["heading"] = text
            elif tag == "summary":
                self.sections[-1]["folded"].append(text)
            else:
                self.sections[-1]["subheadings"].append(text)
            self._in = None


def outline(page: str) -> list[dict]:
    """The sections of a report page in order, each as a dict (see the module docstring)."""
    p = _Outline()
    p.feed(page)
    return p.sections


def tiny_report_outline(out: Path, runs: Path, bench: Path, committed: Path) -> dict:
    """Write the tiny report in both languages under ``out`` and return ``{lang: outline}``."""
    from attnkit.report.build import write_report

    res = {}
    for lang in ("en", "zh"):
        run = write_report(out, size="tiny", runs=runs, bench_results=bench, committed_results=committed, lang=lang,
                           log=lambda m: None)
        res[lang] = outline(run.path.read_text(encoding="utf-8"))
    return res


def committed_copy(results: Path, runs: list[str], dest: Path) -> Path:
    """``dest`` holding links to only the committed runs ``runs`` (``experiment/run``) of ``results``:
    runs committed later would add their own sub-headings and figures to the page."""
    for run in runs:
        (dest / run).parent.mkdir(parents=True, exist_ok=True)
        (dest / run).symlink_to((results / run).resolve(), target_is_directory=True)
    return dest


if __name__ == "__main__":
    import tempfile

    root = Path(__file__).resolve().parents[2]
    runs = sorted(p.parent.relative_to(root / "results").as_posix() for p in (root / "results").glob("*/*/results.json"))
    with tempfile.TemporaryDirectory() as d:
        committed = committed_copy(root / "results", runs, Path(d) / "results")
        doc = {"committed_runs": runs,
               **tiny_report_outline(Path(d) / "report", Path(d) / "no-runs", root / "benchmarks" / "results", committed)}
    Path(sys.argv[1]).write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
