"""The roadmap section: every lesson and experiment it tells a reader to run exists in this checkout
(both languages for lessons), and a step naming something absent is shown as not available."""

from __future__ import annotations

from attnkit.experiments import Results, get, run_experiment
from attnkit.experiments.roadmap import experiment as roadmap


def test_every_step_names_something_that_exists(tmp_path):
    doc = run_experiment("roadmap", out=tmp_path, show_progress=False)
    steps = doc["results"]["steps"]
    assert doc["results"]["course_found"]
    missing = [(s["lesson"], s["experiment"]) for s in steps if not (s.get("lesson_found", True) and s.get("experiment_found", True))]
    assert missing == []
    assert all(s["commands"] for s in steps)
    res = Results(doc["results"], tmp_path, {})
    en, zh = (get("roadmap").report(res, tmp_path, lang) for lang in ("en", "zh"))
    assert en.html.count("<tr>") == zh.html.count("<tr>") == len(steps) + 1
    assert "attnkit experiment scoring" in en.html and "命令" in zh.html


def test_absent_step_is_flagged(tmp_path, monkeypatch):
    monkeypatch.setattr(roadmap, "STEPS", [(("q", "问"), "99_no_such_lesson", "no_such_experiment", "")])
    rows = roadmap.check_steps()
    assert rows[0]["lesson_found"] is False and rows[0]["experiment_found"] is False
    html = get("roadmap").report(Results({"steps": rows, "course_found": True}, tmp_path, {}), tmp_path, "en").html
    assert "not available here: 99_no_such_lesson, no_such_experiment" in html
