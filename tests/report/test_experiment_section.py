"""An experiment as a section of ``attnkit report``, from the facts the experiment states: its newest
results under the runs folder, or a run the report starts (at the tiny size with the experiment's
``tiny`` overrides), its own ``report`` with the committed long runs handed in, its summary row,
and the place its ``report_order`` gives it; an experiment folder that fails to import is a failed
section."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnkit.experiments import Experiment, Section, latest_results, register, run_experiment
from attnkit.experiments.lab import registry as reg
from attnkit.page.story import SectionContext
from attnkit.report.build import write_report
from attnkit.report.contents import story
from attnkit.report.experiment_section import experiment_section


@pytest.fixture
def probes():
    """Two throwaway experiments: one with its own section, one cheap enough for the report to run."""
    calls = []

    @register
    class Shown(Experiment):
        name = "h5_shown"
        help = "probe with a section"
        quick = {"k": 1}
        tiny = {"k": 3}
        title = ("Probe <1>", "探针 <1>")
        question = ("What does the probe score?", "探针得几分？")
        how_to_read = ("Higher is more.", "越高越多。")
        report_order = 15

        def run(self, ctx):
            return {"score": ctx.config["k"] * 10}

        def report(self, results, out_dir, lang="en", full_results=None):
            assert results.run_dir.is_dir() and results.meta["experiment"] == "h5_shown"
            runs = ",".join(f"{k}={v['score']}" for k, v in (full_results or {}).items())
            return Section("ignored", f"<p>score={results['score']} lang={lang} committed=[{runs}]</p>")

        def summary(self, results, lang="en", full_results=None):
            return (f"score {results['score']}", "probes work")

    @register
    class Cheap(Experiment):
        name = "h5_cheap"
        help = "probe run by the report"
        run_in_report = True

        def run(self, ctx):
            calls.append(ctx.out)
            return {"ran": True}

    yield calls
    for name in ("h5_shown", "h5_cheap"):
        reg._REGISTRY.pop(name)


def write_run(root: Path, folder: str, run: str, results: dict, **meta) -> Path:
    d = root / folder / run
    d.mkdir(parents=True)
    doc = {"schema_version": 1, "experiment": folder, "preset": "full", "seeds": [0, 1, 2], "time_s": 3600.0,
           "finished": "2026-12-03T10:59:06+00:00", **meta, "results": results}
    (d / "results.json").write_text(json.dumps(doc), encoding="utf-8")
    return d


def test_the_section_reads_the_newest_results_and_the_experiments_facts(tmp_path, probes):
    runs = tmp_path / "runs"
    run_experiment("h5_shown", out=runs / "old", overrides={"k": 1}, show_progress=False)
    run_experiment("h5_shown", out=runs / "new", overrides={"k": 2}, show_progress=False)
    doc = json.loads((runs / "old" / "results.json").read_text())
    doc["finished"] = "1999-01-01T00:00:00+00:00"  # make "old" the older one whatever the clock did
    (runs / "old" / "results.json").write_text(json.dumps(doc))
    (runs / "junk").mkdir()
    (runs / "junk" / "results.json").write_text("{not json")
    assert latest_results("h5_shown", runs)[1] == runs / "new"

    sec = experiment_section(reg.get("h5_shown"))
    assert (sec.id, sec.order, sec.title, sec.question[1]) == ("h5_shown", 15, ("Probe <1>", "探针 <1>"), "探针得几分？")
    run = write_report(tmp_path / "report", [sec], runs=runs, log=lambda m: None)
    page = run.path.read_text(encoding="utf-8")
    assert "<h2>Probe &lt;1&gt;</h2>" in page and "What does the probe score?" in page  # the experiment's own title, escaped
    assert "<p>score=20 lang=en committed=[]</p>" in page and f"From <code>{runs.name}/new/results.json</code>" in page  # never a machine's absolute path


def test_without_results_the_report_runs_the_cheap_ones_and_names_the_command_for_the_rest(tmp_path, probes):
    shown, cheap = experiment_section(reg.get("h5_shown")), experiment_section(reg.get("h5_cheap"))
    run = write_report(tmp_path / "report", [shown, cheap], runs=tmp_path / "none", run_missing=False, log=lambda m: None)
    page = run.path.read_text(encoding="utf-8")
    assert "No results yet: run <code>attnkit experiment h5_shown</code>" in page
    assert probes == [tmp_path / "report" / "experiments" / "h5_cheap"]  # run_in_report: run at its quick configuration
    # asked to run what is missing, at the tiny size: the quick preset with the experiment's tiny overrides
    run = write_report(tmp_path / "tiny", [shown], runs=tmp_path / "none", size="tiny", log=lambda m: None)
    assert "<p>score=30 lang=en committed=[]</p>" in run.path.read_text(encoding="utf-8")


def test_committed_runs_are_handed_to_the_report_and_the_summary(tmp_path, probes):
    root = tmp_path / "results"
    write_run(root, "h5_shown", "full", {"score": 1})
    write_run(root, "h5_shown", "dates-full", {"score": 2})
    quick = write_run(tmp_path / "runs", "h5_shown", "quick", {"score": 7}, preset="quick")
    sec = experiment_section(reg.get("h5_shown"))
    ctx = SectionContext(out=tmp_path / "report", committed_results=root)
    data = {"results": str(quick / "results.json"), "source": "runs"}
    assert "score=7 lang=zh committed=[dates-full=2,full=1]" in sec.render(data, ctx, "zh")
    assert "committed=[]" in sec.render(data, SectionContext(out=tmp_path / "report"), "en")
    assert sec.summary(data, ctx, "en") == ("score 7", "probes work")


def test_without_a_quick_run_each_committed_run_is_shown_under_its_name(tmp_path, probes):
    root = tmp_path / "results"
    write_run(root, "h5_shown", "full", {"score": 1})
    sec = experiment_section(reg.get("h5_shown"))
    html = sec.render({"missing": True}, SectionContext(out=tmp_path / "report", committed_results=root), "en")
    assert "No results yet" in html and "<h3>committed run &#x27;full&#x27;" in html and "score=1 lang=en" in html
    assert "score=1" not in sec.render({"missing": True}, SectionContext(out=tmp_path / "report"), "en")


def test_the_default_report_lists_the_results_and_the_committed_runs(tmp_path):
    class Plain(Experiment):
        name = "h5_plain"
        help = "plain <probe>"

    from attnkit.experiments import Results

    res = Results({"a": 1}, tmp_path, {})
    section = Plain().report(res, tmp_path, "en", full_results={"full": Results({"a": 2}, tmp_path, {})})
    assert section.title == "plain <probe>" and "<p>plain &lt;probe&gt;</p>" in section.html
    assert section.html.index("&quot;a&quot;: 1") < section.html.index("<h3>full</h3>") < section.html.index("&quot;a&quot;: 2")
    assert Plain().summary(res, "en") is None


def test_the_story_places_experiments_by_their_order_and_leaves_test_beds_out(probes):
    ids = [s.id for s in story()]
    assert ids.index("intro") < ids.index("h5_shown") < ids.index("seq2seq")  # report_order 15: between 10 and 20
    assert ids[-2:] == ["h5_cheap", "summary"]  # the default order: after every built-in section
    assert "tiny" not in ids  # `tiny` is a test bed (report_order None)


def test_an_experiment_folder_that_fails_to_import_is_a_failed_section(tmp_path, monkeypatch):
    monkeypatch.setattr(reg, "_IMPORT_ERRORS", {"broken": "SyntaxError: invalid syntax"})
    sec = next(s for s in story() if s.id == "experiment-broken")
    run = write_report(tmp_path, [sec], log=lambda m: None)
    assert run.failed == ["experiment-broken"]
    assert "attnkit.experiments.broken failed to import: SyntaxError" in run.path.read_text(encoding="utf-8")


def test_the_cached_section_depends_on_the_shared_drawing_code():
    # a run's figures are cached with its numbers: the code that draws them (the MiniLM head grid's colour bar
    # lives in attnkit.inspect.plots) is part of the key, so a changed label is drawn again, not served stale
    from attnkit.experiments import get
    from attnkit.report.experiment_section import DRAWING_MODULES, experiment_modules

    modules = experiment_modules(get("minilm_maps"))
    assert {"attnkit.inspect.plots", "attnkit.inspect.figure_text"} <= set(DRAWING_MODULES) <= set(modules)
    assert "attnkit.experiments.minilm.viz" in modules
