"""The blockwise fused route's segment cache (:mod:`attnkit.backends.blockwise.kernel.segments_cache`) and the
cost model's relative-bias route: reuse only when nothing changed (an in-place edit of mask data is
seen, or the output would be wrong), bounded, the same route and the same ``auto`` choice as
without the cache, and an estimate for every route the backend runs."""

from __future__ import annotations

import random

import pytest
import torch

import attnkit
from attnkit import biases
from attnkit import masks as M
from attnkit.backends import blockwise
from attnkit.backends.blockwise.kernel import segments_cache as route_cache
from _routes import route_of
from attnkit.backends.blockwise.routes import base as route_base
from attnkit.backends.blockwise.routes.relative import RELATIVE
from attnkit.backends.blockwise.kernel.tiles import segments_of
from attnkit.core.call import make_call
from attnkit.core.dispatch import choose


@pytest.fixture(autouse=True)
def empty_cache():
    route_cache.clear_cache()
    route_base._ESTIMATES.clear()
    yield
    route_cache.clear_cache()
    route_base._ESTIMATES.clear()


def _uncached(mp):
    """Inside ``mp`` (a monkeypatch context): no route or estimate is cached or served from a cache."""
    mp.setattr(route_cache, "mask_key", lambda m: (None, None))
    mp.setattr(route_base, "ESTIMATE_ENTRIES", 0)


def _qkv(B=1, H=2, L=512, S=512, E=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, n, E, generator=g) for n in (L, S, S)]


def _oracle(q, k, v, mask):
    """softmax(q kᵀ / sqrt(E), masked) v in float64, from the dense mask."""
    allowed = mask.materialize(q.shape[2], k.shape[2], batch=q.shape[0])
    s = (q.double() @ k.double().transpose(-1, -2)) / q.shape[-1] ** 0.5
    w = torch.softmax(s.masked_fill(~allowed, float("-inf")), -1).nan_to_num(0.0)
    return w @ v.double()


def _tol(q, k, v, mask):
    """Twice the float32 reference's own error against the float64 oracle, at least 1e-6."""
    ref32 = attnkit.attention(q, k, v, mask=mask, backend="reference").out
    return max(2 * float((ref32.double() - _oracle(q, k, v, mask)).abs().max()), 1e-6)


def test_in_place_edit_of_document_ids_is_seen():
    q, k, v = _qkv()
    ids = torch.tensor([0] * 256 + [1] * 256)  # two documents: the off-diagonal 256-key tiles are skipped
    mask = M.document(ids)
    first = attnkit.attention(q, k, v, mask=mask, backend="blockwise").out
    assert (first.double() - _oracle(q, k, v, mask)).abs().max() <= _tol(q, k, v, mask)
    assert route_cache.cache_info()["size"] == 1
    est_before = blockwise.estimate(make_call(q, k, v, mask=mask))
    ids.fill_(0)  # one document now: every tile is needed; stale segments would skip half of them
    second = attnkit.attention(q, k, v, mask=mask, backend="blockwise").out
    assert (second.double() - _oracle(q, k, v, mask)).abs().max() <= _tol(q, k, v, mask)
    assert (first - second).abs().max() > 1e-2
    est_after = blockwise.estimate(make_call(q, k, v, mask=mask))
    with pytest.MonkeyPatch.context() as mp:
        _uncached(mp)
        assert est_after == blockwise.estimate(make_call(q, k, v, mask=mask)) != est_before  # twice the pairs


def test_in_place_edit_of_a_captured_tensor_is_seen():
    q, k, v = _qkv()
    limit = torch.tensor(200)
    mask = M.custom(lambda b, h, qi, kv: kv < limit, depends_on=())
    first = attnkit.attention(q, k, v, mask=mask, backend="blockwise").out
    limit.fill_(400)  # keys 256..399 were in an EMPTY tile; now they may be seen
    second = attnkit.attention(q, k, v, mask=mask, backend="blockwise").out
    assert (second.double() - _oracle(q, k, v, mask)).abs().max() <= _tol(q, k, v, mask)
    assert (first - second).abs().max() > 1e-2


def test_a_new_mask_object_is_not_served_another_ones_segments():
    a = M.document(torch.tensor([0] * 256 + [1] * 256))
    segs_a = route_cache.cached_segments(a, 512, 512)
    b = M.document(torch.zeros(512, dtype=torch.long))
    assert route_cache.cached_segments(b, 512, 512) == segments_of(b, 512, 512) != segs_a
    assert route_cache.cached_segments(a, 512, 512) is segs_a  # still the first one's


def test_the_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(route_cache, "CACHE_ENTRIES", 4)
    mask = M.document(torch.zeros(600, dtype=torch.long))
    for L in range(1, 13):
        route_cache.cached_segments(M.prefix_lm(3), L, 600)
        route_cache.cached_segments(mask, 600, 600)
        assert route_cache.cache_info()["size"] <= 4


def test_the_estimate_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(route_base, "ESTIMATE_ENTRIES", 3)
    for L in range(1, 9):
        q, k, v = _qkv(L=L, S=40)
        for mask in (M.causal(), M.sliding_window(5, 0), M.document(torch.zeros(40, dtype=torch.long), torch.zeros(L, dtype=torch.long))):
            blockwise.estimate(make_call(q, k, v, mask=mask))
            assert len(route_base._ESTIMATES) <= 3


def _random_mask(rng: random.Random, B: int, L: int, S: int):
    kind = rng.choice(["causal", "causal_tl", "window", "document", "padding", "prefix", "custom", "and"])
    if kind == "causal":
        return M.causal()
    if kind == "causal_tl":
        return M.causal(align="top_left")
    if kind == "window":
        return M.sliding_window(rng.randint(0, 300), rng.randint(0, 300))
    if kind == "document" and L == S:
        cuts = sorted(rng.sample(range(1, S), min(3, S - 1))) if S > 1 else []
        ids = torch.zeros(S, dtype=torch.long)
        for c in cuts:
            ids[c:] += 1
        return M.document(ids)
    if kind == "padding":
        return M.padding_mask([rng.randint(1, S) for _ in range(B)], S)
    if kind == "prefix":
        return M.prefix_lm(rng.randint(0, S))
    if kind == "custom":
        period = rng.randint(1, 400)
        return M.custom(lambda b, h, qi, kv: (kv // period) % 2 == 0, depends_on=())
    return M.causal() & M.padding_mask([rng.randint(1, S) for _ in range(B)], S)


@pytest.mark.parametrize("seed", range(12))
def test_cached_routes_and_choices_equal_uncached(seed, monkeypatch):
    rng = random.Random(seed)
    B = rng.randint(1, 3)
    L = rng.choice([1, 7, 64, 255, 256, 257, 512, rng.randint(1, 900)])
    S = L if rng.random() < 0.5 else rng.randint(1, 900)
    q, k, v = _qkv(B=B, L=L, S=S, seed=seed)
    mask = _random_mask(rng, B, L, S)
    call = make_call(q, k, v, mask=mask)
    if "h" not in mask.dims:
        assert route_cache.cached_segments(mask, L, S) == segments_of(mask, L, S)
    with monkeypatch.context() as mp:  # no cache at all
        _uncached(mp)
        cold_route = route_of(call)
        cold_backend, cold_report = choose(call, "auto")
        cold = (cold_backend.name, cold_report.reason, cold_report.rejected, cold_report.estimates)
    route_cache.clear_cache()
    for _ in range(2):  # filled, then served from the cache
        assert route_of(call) == cold_route
        backend, report = choose(call, "auto")
        assert (backend.name, report.reason, report.rejected, report.estimates) == cold


def _relative_plan(call):
    """The relative route's plan for ``call``, or None when that route does not serve it."""
    return RELATIVE.plan(call) if RELATIVE.applies(call) else None


@pytest.mark.parametrize("mask", [None, "causal", "window", "padding"])
@pytest.mark.parametrize("bias", ["alibi", "t5"])
def test_relative_bias_route_has_its_own_estimate(mask, bias):
    q, k, v = _qkv(L=300, S=300)
    m = {None: None, "causal": M.causal(), "window": M.sliding_window(40, 0), "padding": M.padding_mask([250], 300)}[mask]
    b = biases.ALiBi(2) if bias == "alibi" else biases.T5RelativeBias(2, bidirectional=True)
    call = make_call(q, k, v, mask=m, bias=b)
    relative = route_of(call) is None and _relative_plan(call) is not None
    est = blockwise.estimate(call)
    assert (est["path"] == RELATIVE.name) == relative
    assert relative == (mask != "padding")  # padding is not a function of key - query: tile loop


def test_auto_names_the_relative_route_it_picks():
    q, k, v = _qkv(L=512, S=512, H=8, E=64)
    call = make_call(q, k, v, bias=biases.ALiBi(8), mask=M.causal())
    if _relative_plan(call) is None:
        pytest.skip("the fused kernel is not available for float32 on this torch")
    out = attnkit.attention(q, k, v, bias=biases.ALiBi(8), mask=M.causal())
    # SDPA would build the dense (1, H, L, S) bias every call: the relative route is estimated ~3x faster
    assert out.report.backend == "blockwise"
    chosen, ran = out.report.reason.split("; ran: ")
    assert RELATIVE.name in chosen and ran == RELATIVE.name  # the estimate named the route that ran
