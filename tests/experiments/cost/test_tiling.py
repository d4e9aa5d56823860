"""The online-softmax picture of the cost section: its tile-by-tile recurrence ends on the exact max, sum and
softmax attention, and on what attnkit's blockwise backend returns for the same row."""

from __future__ import annotations

import math

import pytest

from attnkit.experiments.cost.tiling import trace


@pytest.mark.parametrize("S,tile", [(256, 64), (100, 32), (7, 64)])
def test_the_recurrence_ends_on_the_exact_softmax(S, tile):
    t = trace(S=S, tile=tile, E=8, seed=1)
    assert len(t["steps"]) == math.ceil(S / tile) and t["steps"][-1]["end"] == S
    assert t["steps"][-1]["max"] == t["exact_max"]
    assert t["steps"][-1]["sum"] == pytest.approx(t["exact_sum"], rel=1e-12)
    assert all(a["max"] <= b["max"] for a, b in zip(t["steps"], t["steps"][1:]))  # the running max never falls
    assert t["error_vs_exact"] < 1e-12 and t["error_vs_blockwise"] < 1e-12  # float64 on both sides
