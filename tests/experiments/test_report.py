"""``attnkit report`` takes one section per registered experiment from its latest results, through
the registry (no report code per experiment in the report package)."""

from __future__ import annotations

import json

import pytest

from attnkit.experiments import Experiment, Section, register, run_experiment
from attnkit.experiments import registry as reg
from attnkit.report.build import build_report
from attnkit.report.experiments_section import experiment_sections, latest_results


@pytest.fixture
def probes():
    """Two throwaway experiments: one with a custom section, one that the report may run itself."""
    calls = []

    @register
    class Shown(Experiment):
        name = "h5_shown"
        help = "probe with a section"
        quick = {"k": 1}
        report_order = 1

        def run(self, ctx):
            return {"score": ctx.config["k"] * 10}

        def report(self, results, out_dir, lang):
            assert results.run_dir.is_dir() and results.meta["experiment"] == "h5_shown"
            return Section("Probe section <1>", f"<p>score={results['score']} lang={lang}</p>")

    @register
    class Cheap(Experiment):
        name = "h5_cheap"
        help = "probe run by the report"
        quick = {}
        report_order = 2
        run_in_report = True

        def run(self, ctx):
            calls.append(ctx.out)
            return {"ran": True}

    yield calls
    for name in ("h5_shown", "h5_cheap"):
        reg._REGISTRY.pop(name)


def _probe_sections(runs):
    return [s for s in experiment_sections(runs) if s[0] in ("probe with a section", "probe run by the report")]


def test_sections_come_from_the_latest_results(tmp_path, probes):
    runs = tmp_path / "runs"
    run_experiment("h5_shown", out=runs / "old", overrides={"k": 1}, show_progress=False)
    newer = run_experiment("h5_shown", out=runs / "new", overrides={"k": 2}, show_progress=False)
    doc = json.loads((runs / "old" / "results.json").read_text())
    doc["finished"] = "1999-01-01T00:00:00+00:00"  # make "old" the older one whatever the clock did
    (runs / "old" / "results.json").write_text(json.dumps(doc))
    (runs / "junk").mkdir()
    (runs / "junk" / "results.json").write_text("{not json")
    found, run_dir = latest_results("h5_shown", runs)
    assert run_dir == runs / "new" and found["results"] == newer["results"] == {"score": 20}

    page = build_report(tmp_path / "report", _probe_sections(runs), log=lambda m: None).read_text()
    assert "Probe section &lt;1&gt;" in page and "<p>score=20 lang=en</p>" in page  # the section's own title, escaped
    assert f"From <code>{runs / 'new'}/results.json</code>" in page
    # the cheap experiment had no results: the report ran its quick configuration into its own folder
    assert probes == [tmp_path / "report" / "experiments" / "h5_cheap"]
    assert "ran" in page


def test_an_experiment_without_results_says_how_to_get_them(tmp_path, probes):
    title, fn = next(s for s in experiment_sections(tmp_path / "none") if s[0] == "probe with a section")
    html = fn(tmp_path / "report")
    assert "No results yet" in html and "attnkit experiment h5_shown --quick" in html
    # asked to, the report runs it at its quick configuration
    title, fn = next(s for s in experiment_sections(tmp_path / "none", run_missing=True) if s[0] == "probe with a section")
    section = fn(tmp_path / "report")
    assert section.title == "Probe section <1>" and "<p>score=10 lang=en</p>" in section.html
    assert (tmp_path / "report" / "experiments" / "h5_shown" / "results.json").exists()


def test_experiments_without_report_order_are_left_out(probes):
    titles = [t for t, _ in experiment_sections("does-not-exist")]
    assert "probe with a section" in titles
    assert not any("reverse digit" in t for t in titles)  # `tiny` is a test bed (report_order None)
