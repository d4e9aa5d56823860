"""What a learner's page must hold, read from the HTML of a written report: per section the tables in
the main flow (outside ``<details>``), the links and image sources, the "Go deeper" lesson links,
the language of each figure, and how much of its visible prose is Chinese.

Used by ``test_page_story.py`` on the tiny report, and runnable on any written page:
``python tests/report/_page_checks.py report/index.html`` prints the same numbers.
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path

CJK = re.compile(r"[\u3400-\u9fff]")
LATIN = re.compile(r"[A-Za-z]")
_VOID = {"img", "br", "hr", "meta", "input", "link", "source", "col", "area", "base", "wbr"}


class _Page(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.sections: list[dict] = []
        self.links: list[str] = []  # every href and src that is not inline data or an anchor
        self.details = 0  # depth of <details> around the current position
        self.code = 0  # depth of <pre>/<code>/<style>/<script>/<svg>: not prose
        self.summary_tables = 0

    def _sec(self):
        return self.sections[-1] if self.sections else None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("href", "src"):
            v = a.get(key)
            if v and not v.startswith(("data:", "#")):
                self.links.append(v)
        if tag == "section" and "data-section" in a:
            self.sections.append({"id": a["data-section"], "tables_main": 0, "tables_folded": 0, "lessons": [],
                                  "figures": [], "cjk": 0, "latin": 0, "sowhat": 0, "details": 0})
            return
        sec = self._sec()
        if tag == "details":
            self.details += 1
            if sec is not None:
                sec["details"] += 1
        elif tag in ("pre", "code", "style", "script", "svg"):
            self.code += 1
        if sec is None:
            return
        if tag == "table":
            sec["tables_folded" if self.details else "tables_main"] += 1
        elif tag == "a" and (a.get("href") or "").startswith("course/"):
            sec["lessons"].append(a["href"])
        elif tag == "img":
            sec["figures"].append({"alt": a.get("alt", ""), "lang": a.get("data-figure-lang"), "folded": bool(self.details)})
        elif tag == "div" and "sowhat" in (a.get("class") or "").split():
            sec["sowhat"] += 1

    def handle_endtag(self, tag):
        if tag == "details":
            self.details = max(0, self.details - 1)
        elif tag in ("pre", "code", "style", "script", "svg"):
            self.code = max(0, self.code - 1)

    def handle_data(self, data):
        sec = self._sec()
        if sec is None or self.code:
            return
        sec["cjk"] += len(CJK.findall(data))
        sec["latin"] += len(LATIN.findall(data))


def read_page(path: str | Path) -> dict:
    """``{"sections": [...], "links": [...], "text": page}`` of the page at ``path`` (see the module docstring)."""
    text = Path(path).read_text(encoding="utf-8")
    p = _Page()
    p.feed(text)
    return {"sections": p.sections, "links": p.links, "text": text}


def chinese_share(sec: dict) -> float:
    """Chinese characters over Chinese characters plus Latin letters, in a section's prose (code excluded)."""
    total = sec["cjk"] + sec["latin"]
    return sec["cjk"] / total if total else 1.0


def tables_in_main_flow(page: dict) -> int:
    return sum(s["tables_main"] for s in page["sections"])


if __name__ == "__main__":
    page = read_page(sys.argv[1])
    print(f"tables in the main flow: {tables_in_main_flow(page)}")
    for s in page["sections"]:
        print(f"{s['id']:24s} main tables {s['tables_main']:2d} folded {s['tables_folded']:2d} figures {len(s['figures']):2d} "
              f"lessons {len(s['lessons'])} so-what {s['sowhat']} zh share {chinese_share(s):.2f}")
