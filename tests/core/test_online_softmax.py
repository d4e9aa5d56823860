"""The one online softmax (core/online_softmax.py): tile-by-tile running max/sum and the log-sum-exp
merge equal a one-shot softmax in float64, with exp and with exp2 (scores in natural units or in
units of 1/scale), and rows with nothing allowed give (0, -inf), never NaN, including rows that are
masked in some tiles only. In float32 at logits of several hundred, the exp2 path's weights are as
accurate as the float32 softmax's (the conversion to base 2 comes after the shift by the max)."""

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


def _online(s, v, tile, **kw):
    """(out, lse) of s (rows, n) over v (n, Ev) folded tile by tile; ``kw`` goes to ``step``."""
    scale = kw.get("scale", 1.0)
    m = torch.full((s.shape[0], 1), -math.inf, dtype=s.dtype)
    ell = torch.zeros_like(m)
    acc = torch.zeros(s.shape[0], v.shape[1], dtype=s.dtype)
    for a in range(0, s.shape[1], tile):
        m, _, p, alpha = osm.step(m, s[:, a : a + tile].clone(), **kw)
        ell = ell * alpha + p.sum(-1, keepdim=True)
        acc = acc * alpha + p @ v[a : a + tile]
    safe, lse = osm.finish(m, ell, scale=scale)
    return acc / safe, lse.squeeze(-1)


@pytest.mark.parametrize("mode", [{}, {"exp2": True, "inplace": True}, {"exp2": True, "inplace": True, "scale": 0.125}])
@pytest.mark.parametrize("tile", [1, 7, 37])
def test_running_max_and_sum_equal_a_one_shot_softmax(mode, tile):
    s, v = _scores()
    scale = mode.get("scale", 1.0)
    out, lse = _online(s / scale, v, tile, **mode)  # scores in units of 1/scale
    out_t, lse_t = _truth(s, v)
    torch.testing.assert_close(out, out_t)
    torch.testing.assert_close(lse, lse_t)
    assert not torch.isnan(out).any() and torch.isneginf(lse[0]) and (out[0] == 0).all()


@pytest.mark.parametrize("scale", [1.0, 0.125])
def test_exp2_path_is_as_accurate_as_the_float32_softmax_at_large_logits(scale):
    """Scores of ~700 with spread ~3: scaling them by log2 e before the shift would make every weight
    off by ~700 · 6e-8 relative (4e-5); shifting first keeps the error at the float32 softmax's."""
    g = torch.Generator().manual_seed(3)
    s64 = 700.0 + 3.0 * torch.randn(64, 48, generator=g, dtype=torch.float64)
    v64 = torch.randn(48, 8, generator=g, dtype=torch.float64)
    s32 = s64.float()  # the float32 scores both computations start from
    truth = torch.softmax(s32.double(), -1) @ v64
    ref_err = ((torch.softmax(s32, -1) @ v64.float()).double() - truth).abs().max()
    out, _ = _online(s32 / scale if scale != 1.0 else s32, v64.float(), 16, exp2=True, inplace=True, scale=scale)
    err = (out.double() - truth).abs().max()
    eps = torch.finfo(torch.float32).eps
    assert err <= 2 * ref_err + 4 * eps, (err, ref_err)
    # the order matters: base 2 first (2^(s·log2 e - max)) is an order of magnitude worse here
    s2 = s32 * LOG2E
    p = torch.exp2(s2 - s2.amax(-1, keepdim=True))
    bad = ((p / p.sum(-1, keepdim=True)) @ v64.float()).double() - truth
    assert bad.abs().max() > 4 * err


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
