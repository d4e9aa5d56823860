"""The linear-kernel section: the regrouping it shows is exact, attnkit's elu linear attention
matches a by-hand float64 oracle, and a tiny run gives what the section claims (far fewer
multiply-adds, FAVOR+ error falling with more features on soft scores)."""

from __future__ import annotations

import torch

from attnkit import linear_attention
from attnkit.experiments import Results, get, run_experiment
from attnkit.experiments.linear_kernel.experiment import regrouping_gap


def test_regrouping_is_exact_and_elu_linear_attention_matches_by_hand():
    assert regrouping_gap(64, 8, seed=0) < 1e-12
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 1, 40, 8, generator=g, dtype=torch.float64) for _ in range(3))
    phi = lambda x: torch.where(x > 0, x + 1, x.exp())  # elu(x) + 1, written out
    a = phi(q) @ phi(k).transpose(-2, -1)  # (1, 1, L, S)
    torch.testing.assert_close(linear_attention(q, k, v, feature_map="elu").out, (a @ v) / a.sum(-1, keepdim=True), rtol=1e-12, atol=1e-12)


def test_tiny_run_claims(tmp_path):
    exp = get("linear_kernel")
    doc = run_experiment("linear_kernel", out=tmp_path, overrides=exp.tiny, show_progress=False)
    r = doc["results"]
    assert r["regrouping_gap"] < 1e-12
    assert all(t["linear_madds"] < t["softmax_madds"] for t in r["timing"])
    soft = r["errors"][0]
    assert soft["scale"] == 0.5 and soft["favor"][-1]["error"] < soft["favor"][0]["error"]
    assert all(0 < e["elu"] < 2 for e in r["errors"])
    res = Results(r, tmp_path, {})
    en, zh = (exp.report(res, tmp_path, lang) for lang in ("en", "zh"))
    assert "FAVOR+" in en.html and "核技巧" in zh.html and (tmp_path / "linear_kernel.png").is_file()
