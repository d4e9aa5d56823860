"""The one online softmax (core/online_softmax.py): tile-by-tile running max/sum and the log-sum-exp
merge equal a one-shot softmax in float64, in natural and base-2 units, and rows with nothing
allowed give (0, -inf), never NaN, including rows that are masked in some tiles only."""

from __future__ import annotations

import math

import pytest
import torch

from attnkit.core import online_softmax as osm

LOG2E = 1 / math.log(2)


def _scores(seed=0, rows=6, n=37):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(rows, n, generator=g, dtype=torch.float64) * 30
    s[0] = -math.inf  # fully masked row
    s[1, :20] = -math.inf  # masked in the first tiles only
    s[2, 20:] = -math.inf  # masked in the last tiles only
    v = torch.randn(n, 5, generator=g, dtype=torch.float64)
    return s, v


def _truth(s, v):
    lse = torch.logsumexp(s, -1)
    w = torch.where(torch.isneginf(lse)[:, None], 0.0, torch.softmax(s, -1).nan_to_num(0.0))
    return w @ v, lse


@pytest.mark.parametrize("base2", [False, True])
@pytest.mark.parametrize("tile", [1, 7, 37])
def test_running_max_and_sum_equal_a_one_shot_softmax(base2, tile):
    s, v = _scores()
    m = torch.full((s.shape[0], 1), -math.inf, dtype=s.dtype)
    ell = torch.zeros_like(m)
    acc = torch.zeros(s.shape[0], v.shape[1], dtype=s.dtype)
    for a in range(0, s.shape[1], tile):
        st = s[:, a : a + tile] * (LOG2E if base2 else 1.0)
        m, _, p, alpha = osm.step(m, st, base2=base2)
        ell = ell * alpha + p.sum(-1, keepdim=True)
        acc = acc * alpha + p @ v[a : a + tile]
    safe, lse = osm.finish(m, ell, base2=base2)
    out_t, lse_t = _truth(s, v)
    torch.testing.assert_close(acc / safe, out_t)
    torch.testing.assert_close(lse.squeeze(-1) / (LOG2E if base2 else 1.0), lse_t)
    assert not torch.isnan(acc).any() and torch.isneginf(lse[0]).all() and (acc[0] == 0).all()


def test_merge_of_two_partials_equals_the_whole_row():
    s, v = _scores(1)
    parts = [_truth(s[:, :20], v[:20]), _truth(s[:, 20:], v[20:])]
    out, lse = osm.merge(parts[0][0], parts[0][1], parts[1][0], parts[1][1])
    out_t, lse_t = _truth(s, v)
    torch.testing.assert_close(out, out_t)
    torch.testing.assert_close(lse, lse_t)
    assert (out[0] == 0).all() and torch.isneginf(lse[0])


def test_inplace_step_matches_the_functional_one():
    s, _ = _scores(2)
    m = torch.full((s.shape[0], 1), -math.inf, dtype=s.dtype)
    a = osm.step(m, s.clone())
    b = osm.step(m, s.clone(), inplace=True)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y)
