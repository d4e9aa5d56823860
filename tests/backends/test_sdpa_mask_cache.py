"""The sdpa backend's cache of prepared masks (:mod:`attnkit.backends.sdpa_mask_cache`): reuse only when
nothing changed, bounded, and no guarantee lost (parity with the float64 reference, fully masked rows
0, dead keys never leak, NaN inputs still take the exact path)."""

from __future__ import annotations

import pytest
import torch

import attnkit
from attnkit import masks as M
from attnkit.backends import sdpa_mask_cache as cache


@pytest.fixture(autouse=True)
def empty_cache():
    cache.clear()
    yield
    cache.clear()


def _qkv(B=2, H=4, L=24, S=24, E=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, n, E, generator=g) for n in (L, S, S)]


def _oracle(q, k, v, mask):
    return attnkit.attention(q.double(), k.double(), v.double(), mask=mask, backend="reference").out


def test_same_mask_and_shapes_reuse_one_entry():
    q, k, v = _qkv()
    mask = M.padding_mask([24, 17], 24)
    a = cache.prepared(mask, 2, 4, 4, 24, 24, q)
    assert cache.prepared(mask, 2, 4, 4, 24, 24, q) is a
    assert cache.prepared(mask, 2, 4, 4, 20, 24, q) is not a  # another L
    assert cache.prepared(M.padding_mask([24, 17], 24), 2, 4, 4, 24, 24, q) is a  # another object, equal content
    assert cache.prepared(M.padding_mask([24, 16], 24), 2, 4, 4, 24, 24, q) is not a  # other content


def test_in_place_edit_of_the_mask_data_is_seen():
    q, k, v = _qkv()
    ids = torch.tensor([0] * 12 + [1] * 12)
    mask = M.document(ids)
    first = attnkit.attention(q, k, v, mask=mask, backend="sdpa").out
    assert torch.allclose(first.double(), _oracle(q, k, v, mask), atol=1e-5)
    ids[6:] = 1  # the same mask object now says something else
    second = attnkit.attention(q, k, v, mask=mask, backend="sdpa").out
    assert torch.allclose(second.double(), _oracle(q, k, v, mask), atol=1e-5)
    assert not torch.allclose(first, second)


def test_custom_predicates_are_never_cached():
    q, k, v = _qkv()
    limit = torch.tensor(10)
    mask = M.custom(lambda b, h, qi, kv: kv <= limit)
    a = cache.prepared(mask, 2, 4, 4, 24, 24, q)
    assert cache.prepared(mask, 2, 4, 4, 24, 24, q) is not a
    limit.fill_(3)  # captured by the function: invisible to a cache, so it must rebuild
    out = attnkit.attention(q, k, v, mask=mask, backend="sdpa").out
    assert torch.allclose(out.double(), _oracle(q, k, v, mask), atol=1e-5)


def test_the_cache_is_bounded():
    q, k, v = _qkv()
    for n in range(cache.MAX_ENTRIES + 5):
        attnkit.attention(q, k, v, mask=M.padding_mask([24, 24 - n], 24), backend="sdpa")
    assert len(cache._CACHE) <= cache.MAX_ENTRIES
    big = M.padding_mask([24, 10], 24)
    cache.clear()
    old = cache.MAX_ELEMENTS
    try:
        cache.MAX_ELEMENTS = 10  # a mask over the limit is built but not kept
        cache.prepared(big, 2, 4, 4, 24, 24, q)
        assert len(cache._CACHE) == 0
    finally:
        cache.MAX_ELEMENTS = old


@pytest.mark.parametrize("mask", [M.padding_mask([24, 9], 24), M.sliding_window(5, 0),
                                  M.document(torch.tensor([0] * 5 + [1] * 19)) & M.causal()])
def test_repeated_calls_match_the_oracle_and_keep_fully_masked_rows_zero(mask):
    q, k, v = _qkv(L=24, S=24)
    for _ in range(3):  # the first call fills the cache, the others hit it
        res = attnkit.attention(q, k, v, mask=mask, backend="sdpa")
        assert torch.allclose(res.out.double(), _oracle(q, k, v, mask), atol=1e-5)


def test_fully_masked_rows_on_a_cache_hit():
    q, k, v = _qkv(B=1, L=30, S=12)
    mask = M.causal() & M.padding_mask([12], 12)  # bottom-right causal with L > S: rows 0..17 see nothing
    for _ in range(2):
        res = attnkit.attention(q, k, v, mask=mask, backend="sdpa")
        assert torch.equal(res.out[:, :, :18], torch.zeros_like(res.out[:, :, :18]))
        assert res.report.fully_masked_rows == 4 * 18


@pytest.mark.parametrize("garbage", [float("nan"), float("inf"), 3e38])
def test_dead_keys_never_leak_on_a_cache_hit(garbage):
    q, k, v = _qkv()
    mask = M.padding_mask([24, 16], 24)
    clean = attnkit.attention(q, k, v, mask=mask, backend="sdpa").out
    k2, v2 = k.clone(), v.clone()
    k2[1, :, 16:] = garbage  # padding slots of sequence 1
    v2[1, :, 16:] = garbage
    dirty = attnkit.attention(q, k2, v2, mask=mask, backend="sdpa").out
    assert torch.equal(clean, dirty)


def test_dead_key_gradients_are_zero_and_finite_on_a_cache_hit():
    q, k, v = (t.requires_grad_() for t in _qkv())
    mask = M.padding_mask([24, 16], 24)
    for _ in range(2):
        out = attnkit.attention(q, k, v, mask=mask, backend="sdpa").out
        dq, dk, dv = torch.autograd.grad(out.sum(), (q, k, v))
        assert torch.isfinite(dq).all() and torch.equal(dk[1, :, 16:], torch.zeros_like(dk[1, :, 16:]))
        assert torch.equal(dv[1, :, 16:], torch.zeros_like(dv[1, :, 16:]))


def test_nan_query_still_takes_the_exact_path_on_a_cache_hit():
    q, k, v = _qkv()
    mask = M.padding_mask([24, 16], 24)
    attnkit.attention(q, k, v, mask=mask, backend="sdpa")
    q2 = q.clone()
    q2[0, 0, 3] = float("nan")
    res = attnkit.attention(q2, k, v, mask=mask, backend="sdpa")
    assert torch.isnan(res.out[0, 0, 3]).all() and not torch.isnan(res.out[0, 0, 4]).any()
