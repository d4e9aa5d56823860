"""The scoring section: its statistics match a NumPy oracle, and a tiny run shows the claim it makes
(scaled scores keep the softmax's entropy in a band across d, unscaled ones saturate and lose gradient)."""

from __future__ import annotations

import math

import numpy as np
import torch

from attnkit.experiments import Results, get, run_experiment
from attnkit.experiments.scoring.experiment import score_gradient, weight_stats


def test_weight_stats_and_gradient_match_numpy():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 7)) * 2
    p = np.exp(x - x.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    got = weight_stats(torch.from_numpy(p))
    assert math.isclose(got["entropy"], float((-(p * np.log(p)).sum(-1) / np.log(7)).mean()), rel_tol=1e-12)
    assert math.isclose(got["max_weight"], float(p.max(-1).mean()), rel_tol=1e-12)
    up = rng.normal(size=(3, 7))
    jac_t_up = p * (up - (p * up).sum(-1, keepdims=True))  # softmax Jacobian (diag p − p pᵀ) applied to up
    assert math.isclose(score_gradient(torch.from_numpy(x), torch.from_numpy(up)), float(np.median(np.linalg.norm(jac_t_up, axis=-1))), rel_tol=1e-10)


def test_tiny_run_scaled_stays_in_band_unscaled_saturates(tmp_path):
    exp = get("scoring")
    doc = run_experiment("scoring", out=tmp_path, overrides=exp.tiny, show_progress=False)
    rows = doc["results"]["sweep"]
    scaled = [r["scaled"]["entropy"] for r in rows]
    assert max(scaled) - min(scaled) < 0.05 and min(scaled) > 0.8
    assert rows[-1]["unscaled"]["entropy"] < 0.3 and rows[-1]["unscaled"]["max_weight"] > 0.5
    assert rows[-1]["unscaled"]["grad_median"] < rows[-1]["scaled"]["grad_median"] / 3
    by = {r["score"]: r["per_d"] for r in doc["results"]["compare"]}
    assert by["general"][0]["params"] == 16 * 16 and by["dot"][0]["params"] == 0
    assert by["cosine"][-1]["entropy"] > by["dot"][-1]["entropy"]  # bounded score: no saturation at large d
    res = Results(doc["results"], tmp_path, {})
    en, zh = (exp.report(res, tmp_path, lang) for lang in ("en", "zh"))
    assert "1/√d" in en.html and "熵" in zh.html and (tmp_path / "saturation.png").is_file()
    assert exp.summary(res, "en")[0].startswith("d = ")
