"""The Transformer-block section: the position table matches the paper's formula (NumPy), the model
without positions is exactly permutation-equivariant (so order cannot be learned), and a tiny run
shows the claim: removing positions costs accuracy on sorting."""

from __future__ import annotations

import numpy as np
import torch

from attnkit.experiments import Results, get, run_experiment
from attnkit.experiments.transformer_block.model import VARIANTS, TinyTransformer, sinusoidal


def test_sinusoidal_matches_the_formula():
    L, D = 7, 10
    p, i = np.arange(L)[:, None], np.arange(D // 2)[None, :]
    ref = np.zeros((L, D))
    ref[:, 0::2] = np.sin(p / 10000 ** (2 * i / D))
    ref[:, 1::2] = np.cos(p / 10000 ** (2 * i / D))
    np.testing.assert_allclose(sinusoidal(L, D).numpy(), ref, rtol=1e-5, atol=1e-5)


def test_without_positions_the_model_is_permutation_equivariant():
    torch.manual_seed(0)
    x = torch.randint(0, 10, (3, 8))
    perm = torch.randperm(8)
    blind = TinyTransformer(10, 8, 16, 2, 2, VARIANTS["no positions"]).double()
    torch.testing.assert_close(blind(x[:, perm]), blind(x)[:, perm], rtol=1e-10, atol=1e-10)
    seeing = TinyTransformer(10, 8, 16, 2, 2, VARIANTS["full"]).double()
    assert (seeing(x[:, perm]) - seeing(x)[:, perm]).abs().max() > 1e-3


def test_tiny_run_positions_matter(tmp_path):
    exp = get("transformer_block")
    doc = run_experiment("transformer_block", out=tmp_path, overrides=exp.tiny, show_progress=False)
    v = doc["results"]["variants"]
    assert set(v) == {"full", "no residual", "no layer norm", "no positions"} and all(len(r["acc"]) == 2 for r in v.values())
    assert v["full"]["acc_mean"] > v["no positions"]["acc_mean"] + 0.1
    assert v["full"]["loss"][-1] < v["full"]["loss"][0]
    res = Results(doc["results"], tmp_path, {})
    en, zh = (exp.report(res, tmp_path, lang) for lang in ("en", "zh"))
    assert "without positions" in en.html and "位置编码" in zh.html
    assert (tmp_path / "ablation.png").is_file()
