"""The detection experiment: results.json holds the issue's ``variants`` mapping, the verdict follows
the stated 2-SE rule, the section renders in both languages, a bad ``--data`` folder is one clear
error, and the quick recipe trained on a tiny YOLO-format folder written here finds its objects."""

from __future__ import annotations

import json

import pytest

from attnkit.experiments import Results, get, run_experiment
from attnkit.experiments.detection.plots import verdicts
from attnkit.experiments.lab.runner import SetupError

pytest.importorskip("pycocotools", reason="enable with: pip install pycocotools")
pytest.importorskip("PIL", reason="enable with: pip install pillow")

from _yolo_tiny import write_tiny_folder  # noqa: E402


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("detection")
    doc = run_experiment("detection", seeds=2, out=out, overrides=get("detection").tiny, show_progress=False, device="cpu")
    return doc, out


def test_results_hold_the_variants_mapping(tiny_run):
    doc, out = tiny_run
    assert json.loads((out / "results.json").read_text())["experiment"] == "detection"
    v = doc["results"]["variants"]
    assert list(v) == ["plain", "mhsa_p5"]
    for m in v.values():
        for key in ("map50", "map50_95", "train_s"):
            assert set(m[key]) == {"mean", "std", "per_seed"} and len(m[key]["per_seed"]) == 2
        assert 0 <= m["map50_95"]["mean"] <= m["map50"]["mean"] + 1e-9 <= 1 + 1e-9
        assert m["params"] > 0 and m["gflops"] > 0 and m["act_mem_mb"] > 0
    assert v["mhsa_p5"]["params"] > v["plain"]["params"] and v["mhsa_p5"]["gflops"] > v["plain"]["gflops"]
    for f in doc["results"]["figures"]:
        assert (out / f).stat().st_size > 1000
    assert set(doc["results"]["figures"]) == {"map_vs_cost.png", "boxes.png", "mhsa_attention.png"}


def test_section_shows_numbers_rule_and_published_claims_in_both_languages(tiny_run):
    doc, out = tiny_run
    res = Results(doc["results"], out, doc)
    en = get("detection").report(res, out, "en").html
    zh = get("detection").report(res, out, "zh").html
    m = 100 * doc["results"]["variants"]["plain"]["map50_95"]["mean"]
    for html in (en, zh):
        assert f"{m:.1f}" in html and "<img" in html and "37.3" in html and "2" in html
    assert "standard error" in en and "标准误" in zh and "YOLOv8n" in zh


def _v(means, std=0.01):
    return {"map50_95": {"mean": means, "std": std, "per_seed": [means] * 3}}


def test_verdict_follows_the_two_standard_error_rule():
    se = (2 * 0.01 ** 2 / 3) ** 0.5
    got = verdicts({"plain": _v(0.5), "mhsa_p5": _v(0.5 + 2.1 * se), "mhsa_neck": _v(0.5 - 1.9 * se), "mhsa_p4p5": _v(0.5 - 2.1 * se)})
    assert [got[k]["label"] for k in ("mhsa_p5", "mhsa_neck", "mhsa_p4p5")] == ["helped", "no clear difference", "hurt"]


def test_a_bad_folder_is_one_setup_error(tmp_path):
    with pytest.raises(SetupError, match="read as a YOLO folder: .*data.yaml: missing"):
        (tmp_path / "images").mkdir()
        run_experiment("detection", seeds=1, out=tmp_path / "run", overrides={**get("detection").tiny, "data": str(tmp_path)},
                       show_progress=False, device="cpu")


@pytest.mark.usefixtures("one_thread")
def test_quick_recipe_learns_a_tiny_yolo_folder(tmp_path):
    folder = write_tiny_folder(tmp_path / "yolo", n_train=48, n_val=16, classes=1)
    cfg = {"data": str(folder), "size": 64, "epochs": 10, "batch_size": 4, "variants": "plain", "figures": False}
    doc = run_experiment("detection", seeds=1, out=tmp_path / "run", overrides=cfg, show_progress=False, device="cpu")
    r = doc["results"]
    assert r["data"]["classes"] == ["object"] and r["data"]["train"] == 48
    assert r["variants"]["plain"]["map50"]["mean"] > 0.5  # 120 steps of the quick recipe: boxes found, not chance
