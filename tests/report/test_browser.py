"""The real report, at the tests' tiny size, opened in headless Chromium: every story section is
there (English and Chinese, the same list), no section failed, every image loads and is drawn for a
1,000 px page, the browser logs no console errors, the committed --full runs of results/ are shown
beside the quick ones, and a font that covers Chinese is installed so the zh page renders.

The tiny size runs every section for real (all experiments included, each shrunk to seconds), so
this file takes about a minute on a busy 2-core machine. Needs Debian's chromium + chromium-driver
(``bash .ci/install-browser.sh``, run by ``make test`` where it can); skipped with one summary line
when the browser or its driver is absent (a failure instead when ATTNKIT_REQUIRE_BROWSER is set, as CI does).
"""

import re
import subprocess
from pathlib import Path

import pytest
from _browser import start_chromium  # skips this module when Chromium or its driver is absent (fails on CI)
from _screenshots import WINDOW, spread, take  # noqa: E402

from attnkit.report.contents import story  # noqa: E402

COMMITTED = Path(__file__).resolve().parents[2] / "results"  # committed --full runs, e.g. results/vision/full


@pytest.fixture(scope="module")
def report(tiny_report):  # the session's tiny report, both languages (conftest.py)
    return tiny_report


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    d = start_chromium(tmp_path_factory.mktemp("chromium-profile"), window="1000,1000", page_load_timeout=60)
    yield d
    d.quit()


def page_state(driver, path: Path) -> dict:
    driver.get(path.resolve().as_uri())
    driver.execute_script("document.querySelectorAll('iframe').forEach(f => f.loading = 'eager')")
    return driver.execute_script("""
        const imgs = Array.from(document.images);
        return {
          sections: Array.from(document.querySelectorAll('section[data-section]')).map(s => s.dataset.section),
          headings: Array.from(document.querySelectorAll('section[data-section] > h2')).map(h => h.textContent),
          failed: Array.from(document.querySelectorAll('section[data-failed="1"]')).map(s => s.dataset.section),
          images: imgs.length,
          broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt),
          narrow: imgs.filter(i => i.naturalWidth > 0 && i.naturalWidth < 900).map(i => i.alt + ':' + i.naturalWidth),
          overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
          lang: document.documentElement.lang,
        };""")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_section_present_no_failure_images_load_no_console_errors(report, driver, lang):
    assert report[lang].failed == []
    state = page_state(driver, report[f"{lang}_path"])
    assert state["lang"] == lang
    assert state["sections"] == [s.id for s in story()] + ["glossary"]  # the glossary closes the page
    assert state["failed"] == []
    assert state["images"] >= 12 and state["broken"] == []
    assert state["narrow"] == []  # every figure is drawn for a 1,000 px page (MiniLM's focus plot included)
    assert state["overflow"] <= 0  # nothing wider than the window
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []


def test_chinese_page_mirrors_the_english_one(report, driver):
    en_state, zh_state = page_state(driver, report["en_path"]), page_state(driver, report["zh_path"])
    assert zh_state["sections"] == en_state["sections"] == [s.id for s in story()] + ["glossary"]  # the same sections, in the same order
    assert len(zh_state["headings"]) == len(en_state["headings"]) == len(story()) + 1  # and the glossary
    assert all(re.search(r"[\u4e00-\u9fff]", h) for h in zh_state["headings"])  # every heading is in Chinese
    assert zh_state["images"] == en_state["images"]
    en = report["en_path"].read_text(encoding="utf-8")
    zh = report["zh_path"].read_text(encoding="utf-8")
    assert en.count("<section ") == zh.count("<section ") and en.count("<img ") == zh.count("<img ")
    assert "本节回答的问题" in zh and "Question" in en
    assert set(report["zh"].cached) >= {"intro", "masks", "seq2seq", "misconceptions_heads"}  # same run's numbers


def test_committed_full_runs_are_shown_beside_the_quick_runs(report):
    runs = sorted(p.parent.relative_to(COMMITTED.parent).as_posix() for p in COMMITTED.glob("*/*/results.json"))
    if not runs:
        pytest.skip("no committed runs under results/ in this checkout")
    for lang in ("en", "zh"):
        page = report[f"{lang}_path"].read_text(encoding="utf-8")
        for run in runs:
            assert f"{run}/results.json" in page, (lang, run)


def test_a_font_covering_chinese_is_installed():
    out = subprocess.run(["fc-list", ":lang=zh", "family"], capture_output=True, text=True).stdout
    assert out.strip(), "no font covers Chinese, so the zh report shows empty boxes: run bash .ci/install-browser.sh (fonts-noto-cjk)"


def test_screenshots_of_both_pages_are_not_blank(report, tmp_path):
    """Top, middle and end of each page, as the README shows them (docs/screenshots/, written by _screenshots.py)."""
    d = start_chromium(tmp_path / "profile", window=WINDOW, page_load_timeout=60)
    try:
        shots = take(d, report["en_path"], tmp_path / "shots", "report_en") + take(d, report["zh_path"], tmp_path / "shots", "report_zh")
    finally:
        d.quit()
    assert [p.name for p in shots] == [f"report_{lang}_{place}.png" for lang in ("en", "zh") for place in ("top", "middle", "end")]
    for p in shots:
        assert spread(p) > 10, f"{p.name} looks blank"  # a blank white page has spread 0
