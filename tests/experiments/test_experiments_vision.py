"""The vision experiment at a tiny size: results.json holds what the issue asks for, FLOPs count
the attention, the reading and verdicts follow from the numbers, the report section renders."""

from __future__ import annotations

import json
import math

import pytest
import torch

from attnkit.experiments.registry import Results, get
from attnkit.experiments.runner import run_experiment
from attnkit.experiments.vision import build_model, forward_flops
from attnkit.experiments.vision_report import eta_squared, reading_sentences, verdicts

TINY = {"data": "digits", "train_limit": 96, "test_limit": 48, "epochs": 1, "batch_size": 32,
        "models": "resnet,cbam,mhsa,vit"}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("vision")
    doc = run_experiment("vision", seeds=2, out=out, overrides=TINY, show_progress=False, device="cpu")
    return doc, out


def test_results_hold_accuracy_spread_params_flops_time(tiny_run):
    doc, out = tiny_run
    assert json.loads((out / "results.json").read_text())["experiment"] == "vision"
    r = doc["results"]
    assert r["data"]["name"] == "digits" and r["data"]["notice"] is None  # asked for explicitly: no fallback notice
    assert list(r["models"]) == ["resnet", "cbam", "mhsa", "vit"]
    for m in r["models"].values():
        assert len(m["acc"]["per_seed"]) == 2 and all(0.0 <= a <= 1.0 for a in m["acc"]["per_seed"])
        assert m["acc"]["std"] >= 0 and m["params"] > 0 and m["flops"] > 0 and m["train_time_s"]["mean"] > 0
    assert r["models"]["cbam"]["params"] > r["models"]["resnet"]["params"]
    assert {v["label"] for v in r["verdict"].values()} <= {"helped", "hurt", "no clear difference"}
    for f in r["figures"]:
        assert (out / f).stat().st_size > 1000
    assert "viewer_vit.html" in r["figures"] and "viewer_mhsa.html" in r["figures"]
    assert "accuracy_vs_cost.png" in r["figures"] and "vit_attention.png" in r["figures"]


def test_report_section_is_generated_from_the_numbers(tiny_run):
    doc, out = tiny_run
    sec = get("vision").report(Results(doc["results"], out, doc), out)
    acc = doc["results"]["models"]["resnet"]["acc"]["mean"]
    assert f"{100 * acc:.2f}" in sec.html and "ECA-Net" in sec.html and "<img" in sec.html
    assert "η²" in sec.html


def test_flops_include_the_attention_matmuls():
    cfg = dict(get("vision").quick)
    plain = build_model("resnet", cfg, (28, 28), 10)
    mhsa = build_model("mhsa", cfg, (28, 28), 10)
    C, N = 4 * cfg["width"], 7 * 7
    qkvo = 4 * 2 * N * C * C  # four projections
    scores_values = 2 * 2 * N * N * C  # q kᵀ and p v
    assert forward_flops(mhsa, (1, 28, 28)) - forward_flops(plain, (1, 28, 28)) >= qkvo + scores_values
    assert mhsa.layer3[-1].attn.backend == "auto"  # the counting backend was put back


def test_eta_squared_bounds():
    y = torch.tensor([0, 0, 1, 1, 2, 2])
    one_hot = torch.nn.functional.one_hot(y).double()
    assert math.isclose(eta_squared(one_hot, y), 1.0)
    noise = torch.tensor([[0.1], [0.9], [0.1], [0.9], [0.1], [0.9]])
    assert math.isclose(eta_squared(noise, y), 0.0, abs_tol=1e-12)


def _model(acc, std, params=100, flops=1000, t=1.0):
    return {"acc": {"mean": acc, "std": std, "per_seed": [acc - std, acc + std]}, "params": params, "flops": flops,
            "train_time_s": {"mean": t}, "epochs": 2}


def test_verdicts_and_the_honest_sentence():
    models = {"resnet": _model(0.80, 0.01), "se": _model(0.85, 0.01, 110), "eca": _model(0.805, 0.01, 101), "cbam": _model(0.70, 0.01, 111)}
    v = verdicts(models)
    assert v["se"]["label"] == "helped" and v["eca"]["label"] == "no clear difference" and v["cbam"]["label"] == "hurt"
    assert v["se"]["extra_params"] == 10 and math.isclose(v["se"]["spread"], math.hypot(0.01, 0.01))
    data = {"name": "fashion-mnist", "train": 10, "test": 5}
    text = " ".join(reading_sentences({"models": models, "verdict": v, "data": data}))
    assert "Fashion-MNIST" in text and "+5.00 points" in text and "None of the attention modules" not in text
    del models["se"]
    text = " ".join(reading_sentences({"models": models, "verdict": verdicts(models), "data": data}))
    assert "None of the attention modules beat the plain network" in text


def test_unknown_model_names_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="valid names: resnet, se, eca, cbam, mhsa, vit"):
        run_experiment("vision", seeds=1, out=tmp_path, overrides={**TINY, "models": "resnet,sse"}, show_progress=False, device="cpu")


def test_mhsa_reading_keeps_dense_weights_beyond_the_capture_default():
    from attnkit.experiments.vision_report import read_mhsa
    from attnkit.modules.mhsa2d import MHSA2d

    m = torch.nn.Sequential(MHSA2d(8, 4)).eval()
    r = read_mhsa(m, torch.randn(1, 8, 36, 36))  # 1·4·1296² ≈ 6.7M weights > capture's 4M default
    assert r["grid"] == [36, 36] and 0 < r["mean_distance"] and 0 < r["self_mass"] < 1
