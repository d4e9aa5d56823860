"""The report's heatmaps say what their colour bars say: a shared colour bar's range covers the data
of every panel it labels, and per-panel bars need one label each. Checked on the page kit's
``heatmaps_figure``; the experiments' own figures are checked beside them (``tests/experiments/intro``:
scores and weights each get their bar; ``tests/experiments/positions``: ALiBi's heads share one scale)."""

from __future__ import annotations

import numpy as np
import pytest

from attnkit.page.figures import heatmaps_figure


def _images_and_bars(fig):
    """(image panels, colour bars) of a figure: AxesImages drawn in non-colour-bar axes, and the
    colour bars attached to any image."""
    images = [im for ax in fig.axes for im in ax.get_images()]
    bars = [im.colorbar for im in images if im.colorbar is not None]
    return images, bars


def _close(fig):
    import matplotlib.pyplot as plt

    plt.close(fig)


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
