"""The ``intro`` experiment: its NumPy attention matches PyTorch's softmax attention in float64, a
tiny run finds NumPy and ``attnkit.attention`` agreeing to float64 rounding for every mask, its
figures give scores and weights each their own colour bar, and both languages render."""

from __future__ import annotations

import numpy as np
import torch

from attnkit.experiments import Results, get, run_experiment
from attnkit.experiments.intro.experiment import attention_numpy, steps_figure
from attnkit.page.figures import cjk_font, zh_path

EPS64 = np.finfo(np.float64).eps


def test_numpy_attention_matches_torch_softmax_attention():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(5, 3, generator=g, dtype=torch.float64) for _ in range(3))
    allowed = torch.tril(torch.ones(5, 5, dtype=torch.bool))
    s = (q @ k.T / 3 ** 0.5).masked_fill(~allowed, float("-inf"))
    w_ref = torch.softmax(s, -1)  # (L, S)
    out, w = attention_numpy(q.numpy(), k.numpy(), v.numpy(), allowed.numpy())
    np.testing.assert_allclose(w, w_ref.numpy(), rtol=0, atol=16 * EPS64)
    np.testing.assert_allclose(out, (w_ref @ v).numpy(), rtol=0, atol=64 * EPS64)
    assert (w[~allowed.numpy()] == 0).all()


def test_tiny_run_agrees_with_numpy_and_draws_both_languages(tmp_path):
    exp = get("intro")
    doc = run_experiment("intro", out=tmp_path, overrides=exp.tiny, show_progress=False)
    res = doc["results"]
    assert [r["case"] for r in res["rows"]] == ["plain", "causal", "padding (4 of 6 keys)"]
    for r in res["rows"]:
        # float64 on both sides: a few units of rounding of values of order 1
        assert r["max_out_diff"] < 64 * EPS64 and r["max_w_diff"] < 64 * EPS64 and r["row_sum_err"] < 16 * EPS64, r
    lo, hi = res["score_range"]
    assert lo < 0 < hi and 0 < res["q2_best_w"] <= 1
    for name in res["figures"].values():
        assert (tmp_path / name).is_file()
        assert zh_path(tmp_path / name).is_file() == (cjk_font() is not None)
    results = Results(res, tmp_path, {})
    en, zh = (exp.report(results, tmp_path, lang).html for lang in ("en", "zh"))
    worst = max(max(r["max_out_diff"], r["max_w_diff"]) for r in res["rows"])
    assert f"agree to {worst:.1e}" in en and f"差异不超过 {worst:.1e}" in zh
    assert "attention_numpy" in en and "# 1. 每个查询给每个键打分" in zh
    assert exp.summary(res, "en")[0] == f"NumPy vs attnkit: max |Δ| {worst:.1e}"


def _images_and_bars(fig):
    images = [im for ax in fig.axes for im in ax.get_images()]
    return images, [im.colorbar for im in images if im.colorbar is not None]


def test_scores_and_weights_each_have_a_bar_covering_their_data():
    import matplotlib.pyplot as plt

    g = torch.Generator().manual_seed(0)
    L, E = 6, 4
    q, k, v = (torch.randn(L, E, generator=g, dtype=torch.float64).numpy() for _ in range(3))
    scores = q @ k.T / np.sqrt(E)
    _, w = attention_numpy(q, k, v)
    assert scores.min() < 0  # scores leave [0, 1]: one bar cannot serve scores and weights
    fig = steps_figure(scores, w)
    try:
        images, bars = _images_and_bars(fig)
        assert len(images) == 2 and len(bars) == 2, "each panel needs its own colour bar"
        for im, data in zip(images, (scores, w)):
            lo, hi = im.norm.vmin, im.norm.vmax
            assert lo <= data.min() + 1e-12 and hi >= data.max() - 1e-12, (lo, hi, data.min(), data.max())
            assert (im.colorbar.norm.vmin, im.colorbar.norm.vmax) == (lo, hi)
        labels = [b.ax.get_ylabel() for b in bars]
        assert "score" in labels[0] and "weight" in labels[1]
    finally:
        plt.close(fig)
