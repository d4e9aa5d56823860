"""The tiny report, written once per test session in both languages into one folder (``index.html``
in Chinese, ``index.en.html`` in English, as a reader gets them from ``--lang``), for the tests that
read the page (:mod:`test_page_story`) and open it in a browser (:mod:`test_browser`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "results"
COMMITTED = ROOT / "results"  # committed --full runs, e.g. results/vision/full
COURSE = ROOT / "docs" / "course"


@pytest.fixture(scope="session")
def tiny_report(tmp_path_factory):
    """``{"en": ReportRun, "zh": ReportRun, "en_path": Path, "zh_path": Path, "out": Path}``: the real
    story at the tests' tiny size, every experiment run by the report itself (no earlier results)."""
    from attnkit.report.build import write_report

    out = tmp_path_factory.mktemp("report")
    runs = tmp_path_factory.mktemp("no-runs")
    kw = dict(size="tiny", runs=runs, bench_results=BENCH, committed_results=COMMITTED, course=COURSE, log=lambda m: None)
    en = write_report(out, **kw)
    index_en = out / "index.en.html"
    shutil.copyfile(en.path, index_en)
    zh = write_report(out, lang="zh", **kw)
    return {"en": en, "zh": zh, "en_path": index_en, "zh_path": zh.path, "out": out}
