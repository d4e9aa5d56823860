"""The report's heatmaps say what their colour bars say: each colour bar's range covers the data of
the panels it labels, panels showing different quantities get their own bar, and panels compared
side by side (ALiBi heads) share one scale. Checked on the matplotlib figures the section helpers return."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnkit import biases
from attnkit.page.figures import heatmaps_figure
from attnkit.report.sections import intro, positions


def _images_and_bars(fig):
    """(image panels, colour bars) of a figure: AxesImages drawn in non-colour-bar axes, and the
    colour bars attached to any image."""
    images = [im for ax in fig.axes for im in ax.get_images()]
    bars = [im.colorbar for im in images if im.colorbar is not None]
    return images, bars


def _close(fig):
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_intro_scores_and_weights_each_have_a_bar_covering_their_data():
    g = torch.Generator().manual_seed(0)
    L, E = 6, 4
    q, k, v = (torch.randn(L, E, generator=g, dtype=torch.float64).numpy() for _ in range(3))
    scores = q @ k.T / np.sqrt(E)
    _, w = intro.attention_numpy(q, k, v)
    assert scores.min() < 0  # scores leave [0, 1]: one bar cannot serve scores and weights
    fig = intro.steps_figure(scores, w)
    try:
        images, bars = _images_and_bars(fig)
        assert len(images) == 2 and len(bars) == 2, "each panel needs its own colour bar"
        for im, data in zip(images, (scores, w)):
            lo, hi = im.norm.vmin, im.norm.vmax
            assert lo <= data.min() + 1e-12 and hi >= data.max() - 1e-12, (lo, hi, data.min(), data.max())
            bar_lo, bar_hi = im.colorbar.norm.vmin, im.colorbar.norm.vmax
            assert (bar_lo, bar_hi) == (lo, hi)
        labels = [b.ax.get_ylabel() for b in bars]
        assert "score" in labels[0] and "weight" in labels[1]
    finally:
        _close(fig)


def test_alibi_heads_share_one_scale_so_different_slopes_look_different():
    H, L = 8, 16
    fig = positions.alibi_figure(H, L)
    try:
        images, bars = _images_and_bars(fig)
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
        _close(fig)


def test_shared_bar_covers_every_panel_when_range_is_automatic():
    a, b = np.linspace(-3, 0, 12).reshape(3, 4), np.linspace(-0.1, 0, 12).reshape(3, 4)
    fig = heatmaps_figure([("a", a), ("b", b)], xlabel="x", ylabel="y", cbar="value", vmin=None, vmax=None)
    try:
        images, bars = _images_and_bars(fig)
        assert {(im.norm.vmin, im.norm.vmax) for im in images} == {(-3.0, 0.0)}
        assert len(bars) == 1
    finally:
        _close(fig)


def test_per_panel_bars_need_one_label_per_panel():
    with pytest.raises(ValueError, match="one label per panel"):
        heatmaps_figure([("a", np.zeros((2, 2))), ("b", np.ones((2, 2)))], xlabel="x", ylabel="y", cbar=["only one"],
                        vmin=None, vmax=None)
