"""The masking-pitfall section: its float64 oracle matches an independent NumPy attention, and a tiny
run shows what the section claims (−1e9 leaks on empty rows, float16 refuses or NaNs, −inf NaNs,
attnkit gives 0 and stays within a few eps on the other rows)."""

from __future__ import annotations

import numpy as np
import torch

from attnkit.experiments import Results, get, run_experiment
from attnkit.experiments.masking_pitfall.experiment import make_inputs, oracle


def test_oracle_matches_numpy_on_visible_rows_and_is_zero_on_empty_rows():
    q, k, v, allowed = make_inputs(2, 1, 6, 4, seed=3)
    ref = oracle(q, k, v, allowed).numpy()
    for b in range(2):
        for i in range(6):
            keys = allowed[b, 0, i].numpy()
            if not keys.any():
                assert np.all(ref[b, 0, i] == 0)
                continue
            s = q[b, 0, i].numpy() @ k[b, 0][keys].numpy().T / 2.0
            w = np.exp(s - s.max())
            np.testing.assert_allclose(ref[b, 0, i], (w / w.sum()) @ v[b, 0][keys].numpy(), rtol=1e-12, atol=1e-12)


def test_tiny_run_shows_each_pitfall(tmp_path):
    exp = get("masking_pitfall")
    doc = run_experiment("masking_pitfall", out=tmp_path, overrides=exp.tiny, show_progress=False)
    by = {(r["dtype"], r["recipe"]): r for r in doc["results"]["rows"]}
    assert "overflow" in by[("float16", "fill -1e9")]["error"]
    assert by[("float16", "add -1e9")]["full_nan"] == 1.0
    for dt in ("float32", "bfloat16"):
        assert by[(dt, "fill -1e9")]["full_leak"] > 0.99 and by[(dt, "fill -1e9")]["full_nan"] == 0
        assert by[(dt, "fill -inf")]["full_nan"] == 1.0
    for dt in ("float32", "float16", "bfloat16"):
        r = by[(dt, "attnkit")]
        assert r["full_nan"] == 0 and r["full_leak"] == 0 and r["full_abs_out"] == 0
        assert r["partial_err_in_eps"] < 8 and not r["partial_nan"]
    res = Results(doc["results"], tmp_path, {})
    en, zh = (exp.report(res, tmp_path, lang) for lang in ("en", "zh"))
    assert "NaN" in en.html and "空行" in zh.html and (tmp_path / "recipes.png").is_file()
