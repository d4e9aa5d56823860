"""The ``positions`` experiment: RoPE's score depends only on the offset (checked against a float64
NumPy rotation), a shuffle only reorders outputs without positions but not with ALiBi, ALiBi's two
heads share one colour scale, and both languages render."""

from __future__ import annotations

import numpy as np
import torch

from attnkit import biases
from attnkit.experiments import Results, get, run_experiment
from attnkit.experiments.positions.experiment import alibi_figure, rope_offset_scores, shuffle_change

EPS32 = float(np.finfo(np.float32).eps)


def rope_numpy(x: np.ndarray, pos: int, base: float = 10000.0) -> np.ndarray:
    """x (E,) rotated to position ``pos`` in float64, "rotate half": plane i is (x_i, x_{i+E/2}), angle pos·base^(-2i/E)."""
    half = x.shape[0] // 2
    ang = pos * base ** (-2.0 * np.arange(half) / x.shape[0])
    a, b = x[:half], x[half:]
    return np.concatenate([a * np.cos(ang) - b * np.sin(ang), a * np.sin(ang) + b * np.cos(ang)])


def test_rope_scores_match_a_float64_rotation_and_depend_only_on_the_offset():
    g = torch.Generator().manual_seed(3)
    E = 16
    q, k = torch.randn(1, 1, 1, E, generator=g), torch.randn(1, 1, 1, E, generator=g)
    shifts = [0, 10, 100, 1000]
    got = rope_offset_scores(q, k, shifts)
    qn, kn = q.double().numpy().ravel(), k.double().numpy().ravel()
    want = [float(rope_numpy(qn, 5 + s) @ rope_numpy(kn, 2 + s)) for s in shifts]
    assert max(abs(a - b) for a, b in zip(want, want[1:] + want[:1])) < 1e-12  # the oracle itself: offset only
    # float32 rounding bound of a rotated dot product of E terms (rotations keep the norms)
    tol = (E + 4) * EPS32 * float(np.linalg.norm(qn) * np.linalg.norm(kn))
    for a, b in zip(got, want):
        assert abs(a - b) <= tol, (a, b, tol)


def test_a_shuffle_only_reorders_outputs_without_positions():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(1, 4, 12, 8, generator=g)
    perm = torch.randperm(12, generator=g)
    assert shuffle_change(x, perm) <= 16 * EPS32 * float(x.abs().max())
    assert shuffle_change(x, perm, biases.ALiBi(4)) > 1e-2


def test_tiny_run_and_both_languages(tmp_path):
    exp = get("positions")
    doc = run_experiment("positions", out=tmp_path, overrides=exp.tiny, show_progress=False)
    res = doc["results"]
    assert res["equiv"]["none"] < 1e-5 < 1e-2 < res["equiv"]["ALiBi"]
    assert max(res["rope_scores"]) - min(res["rope_scores"]) < 1e-4 * max(1.0, abs(res["rope_scores"][0]))
    assert (tmp_path / res["figure"]).is_file()
    results = Results(res, tmp_path, {})
    en, zh = (exp.report(results, tmp_path, lang).html for lang in ("en", "zh"))
    assert f"Measured now on {res['length']} random tokens" in en and f"本次在 {res['length']} 个随机 token 上实测" in zh
    assert f"changes the outputs by up to {res['equiv']['ALiBi']:.2f}" in en


def test_alibi_heads_share_one_scale_so_different_slopes_look_different():
    import matplotlib.pyplot as plt

    H, L = 8, 16
    fig = alibi_figure(H, L)
    try:
        images = [im for ax in fig.axes for im in ax.get_images()]
        bars = [im.colorbar for im in images if im.colorbar is not None]
        assert len(images) == 2 and len(bars) >= 1
        norms = {(im.norm.vmin, im.norm.vmax) for im in images}
        assert len(norms) == 1, f"ALiBi panels scaled separately: {norms}"
        (lo, hi), = norms
        bm = biases.ALiBi(H).materialize(L, L)[0]
        assert lo <= float(bm[0].min()) and lo <= float(bm[H - 1].min()) and hi >= 0.0
        # the same colour for the same bias: the shallow head's farthest bias maps to a very different
        # colour value than the steep head's
        steep, shallow = (images[i].norm(float(bm[h, 0, L - 1])) for i, h in ((0, 0), (1, H - 1)))
        assert abs(float(steep) - float(shallow)) > 0.5
    finally:
        plt.close(fig)
