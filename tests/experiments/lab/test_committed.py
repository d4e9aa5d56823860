"""Committed long runs (results/<experiment>/<run>/results.json): read from the folder handed in and
nowhere else, sorted by name, skipped when they are not this experiment's, and described in one line
in either language. How the report shows them: tests/report/test_experiment_section.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnkit.experiments.lab.committed import committed_runs, describe_run


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


def test_a_partial_run_is_never_shown_as_a_result(tmp_path):
    """A worker that trained some seeds (``--set only_seeds``) writes results marked partial: neither the
    committed runs nor the newest run the report reads may be that worker's, however new it is."""
    from attnkit.experiments.lab.results import latest_results

    root = tmp_path / "results"
    write_run(root, "demo", "full", {"score": 1})
    write_run(root, "demo", "worker", {"trained": ["m-seed1"], "partial": True}, finished="2026-12-05T00:00:00+00:00")
    assert list(committed_runs("demo", root)) == ["full"]
    doc, where = latest_results("demo", root)
    assert doc["results"] == {"score": 1} and where.name == "full"
    write_run(tmp_path / "only", "demo", "worker", {"partial": True})
    assert latest_results("demo", tmp_path / "only") is None
