"""Committed long runs (results/<experiment>/<run>/results.json) in the report: read from the folder
handed in and nowhere else, skipped when they are not this experiment's, handed to an experiment's
``report(..., full_results=...)`` when it takes them and shown by the generic fallback when it does
not, and the folder travels from ``attnkit report --results`` to the sections."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import attnkit.experiments as experiments_pkg
from attnkit.experiments.registry import Experiment, Section
from attnkit.report import build as build_mod
from attnkit.report.committed import committed_runs, describe_run
from attnkit.report.experiment_story import accepts_full_results, experiment_section
from attnkit.report.story import SectionContext


def write_run(root: Path, folder: str, run: str, results: dict, **meta) -> Path:
    d = root / folder / run
    d.mkdir(parents=True)
    doc = {"schema_version": 1, "experiment": folder, "preset": "full", "seeds": [0, 1, 2], "time_s": 3600.0,
           "finished": "2026-12-03T10:59:06+00:00", **meta, "results": results}
    (d / "results.json").write_text(json.dumps(doc), encoding="utf-8")
    return d


def test_committed_runs_reads_only_this_experiments_runs_from_the_given_folder(tmp_path):
    root = tmp_path / "results"
    write_run(root, "demo", "full", {"score": 1})
    write_run(root, "demo", "a-full", {"score": 2}, preset="quick")
    write_run(root, "demo", "other", {"score": 3}, experiment="not-demo")  # another experiment's file in this folder
    write_run(root, "demo", "old", {"score": 4}, schema_version=0)
    (root / "demo" / "broken").mkdir()
    (root / "demo" / "broken" / "results.json").write_text("{not json", encoding="utf-8")
    (root / "demo" / "empty").mkdir()

    runs = committed_runs("demo", root)
    assert list(runs) == ["a-full", "full"]  # sorted by run name
    assert runs["full"]["score"] == 1 and runs["full"].run_dir == root / "demo" / "full"
    assert runs["full"].meta["preset"] == "full" and "results" not in runs["full"].meta
    assert committed_runs("demo", None) == {} and committed_runs("demo", tmp_path / "missing") == {}
    assert committed_runs("nothing", root) == {}
    with pytest.raises(ValueError, match="one path component"):
        committed_runs("../demo", root)
    line = describe_run("full", runs["full"])
    assert "demo/full/results.json" in line and "full preset, 3 seeds, 60 min" in line
    assert "3 个种子" in describe_run("full", runs["full"], "zh")


class TakesFull(Experiment):
    name = "demo"

    def report(self, results, out_dir, lang="en", full_results=None):
        runs = ",".join(f"{k}={v['score']}" for k, v in (full_results or {}).items())
        return Section("t", f"<p>quick={results['score']} committed=[{runs}] lang={lang}</p>")


class OldStyle(Experiment):
    name = "demo"

    def report(self, results, out_dir, lang="en"):
        return Section("t", f"<p>score={results['score']} from {results.run_dir.name}</p>")


def render_demo(tmp_path, monkeypatch, exp, committed: Path | None, lang="en") -> str:
    monkeypatch.setattr(experiments_pkg, "get", lambda name: exp)
    quick = write_run(tmp_path / "runs", "demo", "quick", {"score": 7}, preset="quick")
    sec = experiment_section("demo", ("Demo", "演示"), ("q", "问"), ("r", "读"), est_quick=1)
    ctx = SectionContext(out=tmp_path / "report", committed_results=committed)
    return sec.render({"results": str(quick / "results.json"), "source": "runs"}, ctx, lang)


def test_a_report_that_takes_full_results_gets_every_committed_run(tmp_path, monkeypatch):
    root = tmp_path / "results"
    write_run(root, "demo", "full", {"score": 1})
    write_run(root, "demo", "dates-full", {"score": 2})
    html = render_demo(tmp_path, monkeypatch, TakesFull(), root, lang="zh")
    assert "quick=7 committed=[dates-full=2,full=1] lang=zh" in html
    assert "quick=7 committed=[] lang=en" in render_demo(tmp_path / "b", monkeypatch, TakesFull(), None)


def test_an_old_style_report_gets_the_committed_runs_appended_under_their_names(tmp_path, monkeypatch):
    root = tmp_path / "results"
    write_run(root, "demo", "full", {"score": 1})
    html = render_demo(tmp_path, monkeypatch, OldStyle(), root)
    quick_at, full_at = html.index("score=7 from quick"), html.index("score=1 from full")
    assert quick_at < full_at  # the quick run first, then the committed one below its heading
    assert "<h3>committed run &#x27;full&#x27;" in html and "demo/full/results.json" in html
    assert "score=1" not in render_demo(tmp_path / "b", monkeypatch, OldStyle(), tmp_path / "nowhere")


def test_accepts_full_results_reads_the_signature():
    assert accepts_full_results(TakesFull().report) and not accepts_full_results(OldStyle().report)
    assert accepts_full_results(lambda results, out_dir, lang="en", **kw: None)


def test_the_results_folder_travels_from_the_cli_to_the_sections(tmp_path, monkeypatch):
    from attnkit import cli

    seen = {}

    def fake_write_report(out, **kw):
        seen.update(kw)
        return build_mod.ReportRun(path=Path(out) / "index.html")

    monkeypatch.setattr(build_mod, "write_report", fake_write_report)
    assert cli.main(["report", "--out", str(tmp_path / "r"), "--results", str(tmp_path / "committed")]) == 0
    assert seen["committed_results"] == str(tmp_path / "committed")
    assert cli.main(["report", "--out", str(tmp_path / "r2")]) == 0
    assert seen["committed_results"] == "results"  # default: results/ of the current folder (a checkout)


def test_write_report_hands_the_folder_to_the_context_only_when_it_exists(tmp_path):
    from attnkit.report.build import write_report
    from attnkit.report.story import StorySection

    seen = []
    sec = StorySection("probe", ("Probe", "探针"), ("", ""), ("", ""), lambda ctx: {},
                       lambda d, ctx, lang: seen.append(ctx.committed_results) or "<p>ok</p>", cache=False)
    (tmp_path / "committed").mkdir()
    write_report(tmp_path / "a", [sec], committed_results=tmp_path / "committed", log=lambda m: None)
    write_report(tmp_path / "b", [sec], committed_results=tmp_path / "missing", log=lambda m: None)
    write_report(tmp_path / "c", [sec], committed_results=None, log=lambda m: None)
    assert seen == [tmp_path / "committed", None, None]


def test_without_a_quick_run_the_committed_runs_are_still_shown(tmp_path, monkeypatch):
    root = tmp_path / "results"
    write_run(root, "demo", "full", {"score": 1})
    monkeypatch.setattr(experiments_pkg, "get", lambda name: OldStyle())
    sec = experiment_section("demo", ("Demo", "演示"), ("q", "问"), ("r", "读"), est_quick=1)
    html = sec.render({"missing": True}, SectionContext(out=tmp_path / "report", committed_results=root), "en")
    assert "No results yet" in html and "score=1 from full" in html
    assert "score=1" not in sec.render({"missing": True}, SectionContext(out=tmp_path / "report"), "en")
