"""The misconception experiments: the Q/K/V table names real classes, the statistics match
independent references, and tiny runs give the numbers their definitions imply (no pruning →
cosine 1, a window covering every key → exact attention)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.experiments import run_experiment
from attnkit.experiments.misconceptions.explain import spearman
from attnkit.experiments.misconceptions.heads import TinyViT
from attnkit.experiments.misconceptions.qkv import QKV, SELF, resolve
from attnkit.experiments.lab.threads import threads


def test_qkv_table_names_existing_classes_and_covers_every_kind():
    for row in QKV:
        cls = resolve(row.module)
        assert isinstance(cls, type) and issubclass(cls, torch.nn.Module), row.module
        assert all(row.kind) and all(row.query) and all(row.values) and row.normaliser in ("softmax", "sigmoid")
    names = {r.module.rsplit(".", 1)[1] for r in QKV}
    assert {"MultiHeadAttention", "BahdanauAttention", "LuongAttention", "SqueezeExcite", "ECA", "CBAM", "MHSA2d",
            "VisionTransformer", "TemporalAttention"} <= names
    assert set(SELF) <= {r.kind[0] for r in QKV}
    with pytest.raises(AttributeError):
        resolve("attnkit.modules.cbam.NoSuchAttention")


def test_qkv_run_and_report_in_both_languages(tmp_path):
    doc = run_experiment("misconceptions_qkv", out=tmp_path, show_progress=False)
    from attnkit.experiments import Results, get

    res = Results(doc["results"], tmp_path, {})
    en, zh = (get("misconceptions_qkv").report(res, tmp_path, lang) for lang in ("en", "zh"))
    assert en.html.count("<tr>") == zh.html.count("<tr>") == len(QKV) + 1
    assert f"{len(QKV)} attention layers" in en.html and "通道" in zh.html


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(-5, 5), min_size=3, max_size=20), st.randoms(use_true_random=False))
def test_spearman_matches_scipy_with_ties(xs, rnd):
    from scipy.stats import spearmanr

    ys = [rnd.randint(-3, 3) for _ in xs]
    ours = spearman(np.array(xs, float), np.array(ys, float))
    if len(set(xs)) == 1 or len(set(ys)) == 1:
        assert np.isnan(ours)
    else:
        assert ours == pytest.approx(spearmanr(xs, ys).statistic, abs=1e-12)


def test_tiny_vit_patches_are_the_2x2_blocks():
    model = TinyViT(dim=8, heads=2)
    x = torch.arange(2 * 64, dtype=torch.float32).reshape(2, 1, 8, 8)
    seen = {}
    model.embed.register_forward_hook(lambda m, inp, out: seen.update(p=inp[0]))  # returns None: output kept
    assert model(x).shape == (2, 10)
    want = torch.stack([x[:, 0, 2 * r:2 * r + 2, 2 * c:2 * c + 2].reshape(2, 4) for r in range(4) for c in range(4)], dim=1)
    assert torch.equal(seen["p"], want)
    # embed 4·8+8, pos 16·8, two LayerNorms 2·16, attention 4·(8·8+8), MLP 8·16+16+16·8+8, head 8·10+10
    assert sum(p.numel() for p in model.parameters()) == 40 + 128 + 32 + 288 + 280 + 90


def test_threads_restores_the_setting_and_rejects_bad_values():
    before = torch.get_num_threads()
    with threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads must be a positive int"):
        with threads(0):
            pass


def test_long_window_covering_every_key_is_exact_and_memory_follows_the_report(tmp_path):
    doc = run_experiment("misconceptions_long", out=tmp_path, overrides={"ns": [32, 64], "window": 256, "repeats": 1}, show_progress=False)
    r = doc["results"]
    assert all(row["rel_err"]["window"] < 1e-5 for row in r["rows"])  # the window hides nothing: exact attention
    assert all(abs(row["window_dropped_mass"]) < 1e-5 for row in r["rows"])
    assert all(row["rel_err"]["linear"] > 1e-3 for row in r["rows"])  # linear attention is another function
    B, H = r["shape"]["B"], r["shape"]["H"]
    assert r["per_pair_bytes"] == r["rows"][0]["bytes"]["dense (scores materialized)"] / 32**2 > 0
    n = r["dense_fits_up_to"]
    assert r["per_pair_bytes"] * n * n <= r["budget_bytes"] < r["per_pair_bytes"] * (2 * n) ** 2
    assert (tmp_path / "long_sequences.png").is_file() and B == 1 and H == 4


def test_explain_and_heads_tiny_runs(tmp_path):
    pytest.importorskip("tokenizers")
    doc = run_experiment("misconceptions_explain", out=tmp_path / "e", overrides={"sentences": 1}, show_progress=False)
    layers = doc["results"]["layers"]
    assert len(layers) == 6 and all(-1 <= x["mean"] <= 1 for x in layers)
    s = doc["results"]["sentences"][0]
    assert len(s["attribution"]) == len(s["tokens"]) - 2 and min(s["attribution"]) >= -1e-6
    doc = run_experiment("misconceptions_heads", out=tmp_path / "h", show_progress=False,
                         overrides={"head_counts": [1, 8], "seeds": 1, "epochs": 1, "prune_sentences": 2, "prune_counts": [0, 72]})
    r = doc["results"]
    assert [x["heads"] * x["head_dim"] for x in r["sweep"]] == [32, 32]
    rows = {x["pruned"]: x for x in r["prune"]["rows"]}
    assert rows[0]["least_important"]["mean_cos"] == pytest.approx(1.0, abs=1e-5)
    # with every head pruned the order of pruning no longer matters
    assert rows[72]["least_important"]["mean_cos"] == pytest.approx(rows[72]["random"]["mean_cos"], abs=1e-5)
