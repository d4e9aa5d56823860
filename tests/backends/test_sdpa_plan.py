"""The sdpa backend's per-signature plans (``sdpa_plan.run_planned``): the same numbers as its general
path, bit for bit, and the same guarantees: keys no query may see never leak (a NaN, an inf or a
value so large its score would overflow), a NaN or inf some query may see gets the reference's
result, and fully masked rows are 0. Also the cost model at small n: ``auto`` picks SDPA for a
64-key window where the band kernel's narrow blocks are slower, and the band kernel beyond."""

from __future__ import annotations

import pytest
import torch

import attnkit
from attnkit import masks as M
from attnkit.backends import sdpa, sdpa_plan
from attnkit.core import call_cache
from attnkit.core.call import make_call


pytestmark = pytest.mark.usefixtures("fresh_call_caches")


def _qkv(B=3, H=4, L=20, S=20, E=8, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, n, E, generator=g, dtype=dtype) for n in (L, S, S)]


def _general(q, k, v, mask):
    """The general path: a call without a signature gets no plan."""
    return sdpa.run(make_call(q, k, v, mask=mask))


def _planned(q, k, v, mask):
    res = attnkit.attention(q, k, v, mask=mask, backend="sdpa")
    assert res.report.backend == "sdpa"
    return res


def _reference(q, k, v, mask):
    return attnkit.attention(q, k, v, mask=mask, backend="reference").out


PADDED = lambda: M.padding_mask([20, 13, 0], 20)  # noqa: E731 - dead keys, and a sequence with no key at all
MASKS = {
    "causal": lambda: M.causal(),
    "window": lambda: M.sliding_window(4, 0),
    "padding": PADDED,
    "padding_causal": lambda: PADDED() & M.causal(),
    "document": lambda: M.document(torch.tensor([[0] * 10 + [1] * 10] * 3)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", list(MASKS))
def test_the_planned_path_equals_the_general_one(kind, dtype):
    q, k, v = _qkv(dtype=dtype)
    mask = MASKS[kind]()
    with torch.no_grad():
        general = _general(q, k, v, mask)
        _planned(q, k, v, mask)
        planned = _planned(q, k, v, mask)  # a hit: the plan built by the first call
    assert sdpa_plan._PLANS and all(p is not None for p in sdpa_plan._PLANS.values())
    assert torch.equal(planned.out, general.out) and torch.equal(planned.lse, general.lse)
    assert planned.report.fully_masked_rows == int(general.fully_masked_rows)
    torch.testing.assert_close(planned.out.double(), _reference(q.double(), k.double(), v.double(), mask),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("poison", [float("nan"), float("inf"), 1e30])
def test_dead_keys_never_leak(poison):
    q, k, v = _qkv()
    mask = PADDED()
    _planned(q, k, v, mask)
    k[1, :, 15], v[1, :, 17] = poison, poison  # keys 13.. of sequence 1 are padding
    k[2, :, 3] = poison  # sequence 2 sees no key at all
    got = _planned(q, k, v, mask)
    want = _reference(q, k, v, mask)
    assert torch.isfinite(got.out).all() and got.out[2].eq(0).all()
    torch.testing.assert_close(got.out, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("where", ["q", "k", "v"])
@pytest.mark.parametrize("kind", ["causal", "padding", "document"])
def test_a_nan_some_query_sees_gets_the_reference_result(where, kind):
    q, k, v = _qkv()
    mask = MASKS[kind]()
    _planned(q, k, v, mask)
    {"q": q, "k": k, "v": v}[where][0, 2, 5, 1] = float("nan")
    got = _planned(q, k, v, mask).out
    want = _reference(q, k, v, mask)
    assert torch.isnan(want).any() and torch.equal(torch.isnan(got), torch.isnan(want))
    torch.testing.assert_close(torch.nan_to_num(got), torch.nan_to_num(want), rtol=1e-5, atol=1e-6)


def test_calls_the_plan_does_not_cover_take_the_general_path():
    q, k, v = _qkv()
    # GQA, E != Ev, a sliced head dim (the op would misread it), a bottom-right causal with L < S
    cases = [
        (q, k[:, :2], v[:, :2], M.causal()),
        (q, k, torch.randn(3, 4, 20, 5), PADDED()),
        (q, k, torch.randn(3, 4, 20, 16)[..., ::2], PADDED()),
        (q[:, :, :7], k, v, M.causal("top_left")),
    ]
    for qq, kk, vv, mask in cases:
        call_cache.clear()
        sdpa_plan.clear_plans()
        got = _planned(qq, kk, vv, mask).out
        assert list(sdpa_plan._PLANS.values()) == [None]
        torch.testing.assert_close(got, _reference(qq, kk, vv, mask), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n, expected", [(128, "sdpa"), (256, "sdpa"), (1024, "blockwise")])
def test_auto_picks_sdpa_for_a_short_window_at_small_n(n, expected):
    """A 64-key window at n = 256 ran 1.45 ms on SDPA and 1.61 ms on the band kernel (B=1, H=8, E=64,
    float32, 1 thread); at n = 1024 the band kernel is 3x faster. Decision only: estimates cost no compute."""
    q = torch.empty(1, 8, n, 64)
    call = make_call(q, q, q, mask=M.sliding_window(63, 0))
    from attnkit.core.dispatch import choose

    assert choose(call, "auto")[0].name == expected


def test_the_band_rate_scales_with_narrow_blocks():
    from attnkit.backends.blockwise import cost as bw_cost

    q = torch.empty(1, 8, 2048, 64)
    narrow = bw_cost.estimate(make_call(q, q, q, mask=M.sliding_window(63, 0)))
    wide = bw_cost.estimate(make_call(q, q, q, mask=M.sliding_window(127, 0)))
    # 95 keys per query at half the rate vs 192 at the full rate: about the same time (measured 10.2 and 11.7 ms)
    assert 0.8 < narrow["time_s"] / wide["time_s"] < 1.2
