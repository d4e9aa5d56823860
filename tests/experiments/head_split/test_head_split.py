"""The head-split section: split/merge is exact and matches attnkit's module, the parameter formula
matches both attnkit's and PyTorch's modules, concatenation without W_o keeps each head's change in
its own channels (exactly), and the head sweep is read from a results file, not re-run."""

from __future__ import annotations

import json

import torch

from attnkit import MultiHeadAttention
from attnkit.experiments import Results, get, run_experiment
from attnkit.experiments.head_split.experiment import formula_params, merge, split


def test_split_merge_match_the_module_and_torch():
    torch.manual_seed(0)
    mha = MultiHeadAttention(24, 4).double()
    x = torch.randn(2, 5, 24, dtype=torch.float64)
    torch.testing.assert_close(mha.project_q(x), split(mha.q_proj(x), 4), rtol=0, atol=0)
    assert torch.equal(merge(split(x, 4)), x)
    ref = torch.nn.MultiheadAttention(24, 4, batch_first=True).double()
    ref.in_proj_weight.data = torch.cat([mha.q_proj.weight, mha.k_proj.weight, mha.v_proj.weight]).data
    ref.in_proj_bias.data = torch.cat([mha.q_proj.bias, mha.k_proj.bias, mha.v_proj.bias]).data
    ref.out_proj.weight.data, ref.out_proj.bias.data = mha.out_proj.weight.data, mha.out_proj.bias.data
    q, k, v = mha.project(x, x, x)
    o = torch.softmax(q @ k.transpose(-2, -1) / 6 ** 0.5, -1) @ v  # (B, H, L, E), by hand
    torch.testing.assert_close(mha.out_proj(merge(o)), ref(x, x, x, need_weights=False)[0], rtol=1e-12, atol=1e-12)
    assert formula_params(24) == sum(p.numel() for p in ref.parameters())


def test_tiny_run_and_sweep_read_from_file(tmp_path):
    exp = get("head_split")
    doc = run_experiment("head_split", out=tmp_path / "run", overrides=exp.tiny, show_progress=False)
    r = doc["results"]
    assert r["roundtrip_max"] == 0
    assert all(c["formula"] == c["attnkit"] == c["torch"] for c in r["counts"])
    mv = r["movement"]
    assert mv["without_wo"]["share_outside_head1"] == 0 and mv["without_wo"]["per_block_max"][1] > 0
    assert mv["with_wo"]["share_outside_head1"] > 0.3 and min(mv["with_wo"]["per_block_max"]) > 0
    sweep = {"sweep": [{"heads": 1, "head_dim": 32, "acc_mean": 0.80, "acc_std": 0.01}, {"heads": 8, "head_dim": 4, "acc_mean": 0.95, "acc_std": 0.01}], "dim": 32}
    folder = tmp_path / "runs" / "misconceptions_heads" / "quick"
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"schema_version": 1, "experiment": "misconceptions_heads", "finished": "x",
                                                     "seeds": [0, 1, 2], "results": sweep}))
    res = Results({**r, "sweep_places": [str(tmp_path / "runs")]}, tmp_path / "run", {})
    en = exp.report(res, tmp_path / "page", "en").html
    zh = exp.report(res, tmp_path / "page", "zh").html
    assert "95.0 %" in en and "80.0 %" in en and "more, smaller heads did better" in en
    assert "runs/misconceptions_heads/quick" in en and str(tmp_path) not in en
    assert "95.0%" in zh and "W_o" in zh
    alone = exp.report(Results({**r, "sweep_places": [str(tmp_path / "empty")]}, tmp_path / "run", {}), tmp_path / "page", "en").html
    assert "95.0 %" not in alone and "attnkit experiment misconceptions_heads" in alone
