"""The fast path for repeated calls (:mod:`attnkit.core.call_cache`): a hit gives bit-for-bit the
result of validating and dispatching afresh, and anything that could change the validation, the
backend choice or the result misses: an in-place edit of the mask's data, a new shape, stride,
dtype or grad mode, a registered backend, other options. Values are never part of the key, so a
NaN that appears in a cached signature still gets the reference's result."""

from __future__ import annotations

import pytest
import torch

import attnkit
from attnkit import masks as M
from attnkit.backends import sdpa
from attnkit.core import call_cache, registry


pytestmark = pytest.mark.usefixtures("fresh_call_caches")


def _qkv(B=2, H=4, L=24, S=24, E=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, n, E, generator=g) for n in (L, S, S)]


def _slow(monkeypatch, *args, **kw):
    """The call validated and dispatched afresh, the backend's general path (no signature, no plan)."""
    with monkeypatch.context() as m:
        m.setattr(call_cache, "signature", lambda *a: None)
        return attnkit.attention(*args, **kw)


def _oracle(q, k, v, mask):
    return attnkit.attention(q.double(), k.double(), v.double(), mask=mask, backend="reference").out


MASKS = {
    "none": lambda B, n: None,
    "causal": lambda B, n: M.causal(),
    "window": lambda B, n: M.sliding_window(5, 0),
    "padding": lambda B, n: M.padding_mask([n - 7 * (i % 2) for i in range(B)], n),
    "document": lambda B, n: M.document((torch.arange(n) * 3 // n).expand(B, n).contiguous()),
    "padding_and_causal": lambda B, n: M.padding_mask([n - 7 * (i % 2) for i in range(B)], n) & M.causal(),
    "dense_bool": lambda B, n: torch.rand(1, 1, n, n, generator=torch.Generator().manual_seed(1)) > 0.5,
}


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("kind", list(MASKS))
def test_a_hit_is_bit_identical_to_the_slow_path(kind, grad, monkeypatch):
    q, k, v = _qkv()
    mask = MASKS[kind](2, 24)
    with torch.set_grad_enabled(grad):
        first = attnkit.attention(q, k, v, mask=mask)
        hit = attnkit.attention(q, k, v, mask=mask)
        slow = _slow(monkeypatch, q, k, v, mask=mask)
    assert call_cache.info()["hits"] >= 1
    assert torch.equal(hit.out, slow.out) and torch.equal(hit.out, first.out)
    assert torch.equal(hit.lse, slow.lse)
    assert hit.report.backend == slow.report.backend and hit.report.reason == slow.report.reason
    assert hit.report.fully_masked_rows == slow.report.fully_masked_rows
    assert hit.report.materialized_bytes == slow.report.materialized_bytes
    torch.testing.assert_close(hit.out.double(), _oracle(q, k, v, mask), rtol=1e-5, atol=1e-5)


def test_gradients_through_a_hit_match_the_slow_path(monkeypatch):
    mask = M.padding_mask([24, 17], 24) & M.causal()
    grads = []
    for path in ("fast", "fast", "slow"):
        q, k, v = (t.requires_grad_() for t in _qkv())
        res = attnkit.attention(q, k, v, mask=mask) if path == "fast" else _slow(monkeypatch, q, k, v, mask=mask)
        res.out.sum().backward()
        grads.append([t.grad for t in (q, k, v)])
    for a, b in zip(grads[1], grads[2]):
        assert torch.equal(a, b)


def test_in_place_edit_of_the_mask_data_misses():
    q, k, v = _qkv()
    lengths = torch.tensor([24, 17])
    ids = (torch.arange(24) * 3 // 24).expand(2, 24).contiguous()
    for mask, edit in ((M.document(ids), lambda: ids[1].fill_(0)),):
        attnkit.attention(q, k, v, mask=mask)
        edit()  # every key of sequence 1 in one document now
        got = attnkit.attention(q, k, v, mask=mask).out
        torch.testing.assert_close(got.double(), _oracle(q, k, v, M.document(ids.clone())), rtol=1e-5, atol=1e-5)
    dense = torch.ones(1, 1, 24, 24, dtype=torch.bool).tril()
    attnkit.attention(q, k, v, mask=dense)
    dense.fill_(True)  # the same tensor, now no mask at all
    torch.testing.assert_close(attnkit.attention(q, k, v, mask=dense).out.double(), _oracle(q, k, v, None),
                               rtol=1e-5, atol=1e-5)
    assert lengths.tolist() == [24, 17]


def test_a_replaced_mask_attribute_misses():
    q, k, v = _qkv()
    mask = M.sliding_window(3, 0)
    attnkit.attention(q, k, v, mask=mask)
    mask.left = 10  # edited in place without a tensor: the constants are part of the key
    torch.testing.assert_close(attnkit.attention(q, k, v, mask=mask).out.double(),
                               _oracle(q, k, v, M.sliding_window(10, 0)), rtol=1e-5, atol=1e-5)
    pad = M.padding_mask([24, 17], 24)
    attnkit.attention(q, k, v, mask=pad)
    pad.valid = M.padding_mask([5, 24], 24).valid  # a new tensor object
    torch.testing.assert_close(attnkit.attention(q, k, v, mask=pad).out.double(),
                               _oracle(q, k, v, M.padding_mask([5, 24], 24)), rtol=1e-5, atol=1e-5)


def test_an_equal_mask_rebuilt_each_call_hits():
    q, k, v = _qkv()
    attnkit.attention(q, k, v, mask=M.causal())
    attnkit.attention(q, k, v, mask=M.causal())
    assert call_cache.info() == {"hits": 1, "misses": 1, "size": 1}


@pytest.mark.parametrize("change", ["shape", "stride", "dtype", "grad_mode", "requires_grad", "scale", "backend"])
def test_what_validation_or_the_choice_reads_misses(change):
    q, k, v = _qkv()
    mask = M.causal()
    attnkit.attention(q, k, v, mask=mask)
    kw = {}
    if change == "shape":
        q, k, v = _qkv(L=12, S=12)
    elif change == "stride":
        k = k.transpose(-1, -2).contiguous().transpose(-1, -2)  # the same values, another layout
    elif change == "dtype":
        q, k, v = (t.double() for t in (q, k, v))
    elif change == "requires_grad":
        q = q.clone().requires_grad_()
    elif change == "scale":
        kw["scale"] = 0.5
    elif change == "backend":
        kw["backend"] = "blockwise"
    with torch.set_grad_enabled(change != "grad_mode"):
        res = attnkit.attention(q, k, v, mask=mask, **kw)
    assert call_cache.info()["misses"] == 2
    kw.pop("backend", None)
    torch.testing.assert_close(res.out.double(), attnkit.attention(
        q.double(), k.double(), v.double(), mask=mask, backend="reference", **kw).out, rtol=1e-5, atol=1e-5)
    if change == "backend":
        assert res.report.backend == "blockwise"


def test_invalid_inputs_still_raise_after_a_hit():
    q, k, v = _qkv()
    attnkit.attention(q, k, v, mask=M.causal())
    with pytest.raises(ValueError, match="share a dtype|same batch|scale"):
        attnkit.attention(q, k, v, mask=M.causal(), scale=float("nan"))
    with pytest.raises(TypeError, match="dtype"):
        attnkit.attention(q, k.double(), v, mask=M.causal())
    with pytest.raises(ValueError, match="batch size"):
        attnkit.attention(q, k, v, mask=M.padding_mask([24, 17, 3], 24))


@pytest.mark.parametrize("where", ["q", "k", "v"])
@pytest.mark.parametrize("kind", ["causal", "padding", "none"])
def test_a_nan_in_a_cached_signature_gets_the_reference_result(where, kind):
    q, k, v = _qkv()
    mask = MASKS[kind](2, 24)
    attnkit.attention(q, k, v, mask=mask)
    attnkit.attention(q, k, v, mask=mask)  # the signature is cached and planned
    t = {"q": q, "k": k, "v": v}[where]
    t[0, 1, 3, 2] = float("nan")
    got = attnkit.attention(q, k, v, mask=mask)
    want = attnkit.attention(q, k, v, mask=mask, backend="reference").out
    assert torch.equal(torch.isnan(got.out), torch.isnan(want)) and torch.isnan(want).any()
    torch.testing.assert_close(torch.nan_to_num(got.out), torch.nan_to_num(want), rtol=1e-5, atol=1e-5)


def test_registering_a_backend_or_other_options_miss():
    q, k, v = _qkv()
    attnkit.attention(q, k, v, mask=M.causal())
    b = registry.register("always_first", lambda call: sdpa.run(call), supports=lambda call: None, priority=99)
    try:
        assert attnkit.attention(q, k, v, mask=M.causal()).report.backend == "always_first"
    finally:
        registry.unregister("always_first")
    assert attnkit.attention(q, k, v, mask=M.causal()).report.backend == "sdpa"
    with attnkit.options(memory_budget=1):  # nothing fits: the smallest memory wins, and the report says so
        assert "nothing fits" in attnkit.attention(q, k, v, mask=M.causal()).report.reason
    assert b.name == "always_first"


def test_reports_are_independent_per_call():
    q, k, v = _qkv()
    a = attnkit.attention(q, k, v, mask=M.causal())
    b = attnkit.attention(q, k, v, mask=M.causal())
    a.report.estimates["sdpa"]["time_s"] = -1.0  # the first call's report: the one the choice was made with
    a.report.reason += "; edited"
    b.report.rejected.clear()
    c = attnkit.attention(q, k, v, mask=M.causal())
    assert not b.report.reason.endswith("; edited") and not c.report.reason.endswith("; edited")
    assert c.report.estimates["sdpa"]["time_s"] > 0 and b.report.estimates["sdpa"]["time_s"] > 0
    assert "-0.00 ms" not in c.report.reason and c.report.rejected and c.report.rejected == a.report.rejected


def test_custom_masks_scores_and_biases_take_the_slow_path():
    q, k, v = _qkv()
    keep = torch.ones(24, dtype=torch.bool)
    custom = M.custom(lambda b, h, qi, ki: keep[ki], depends_on=())
    attnkit.attention(q, k, v, mask=custom)
    keep[5:] = False  # the predicate reads a tensor the key cannot see
    got = attnkit.attention(q, k, v, mask=custom).out
    attnkit.attention(q, k, v, score="cosine")
    attnkit.attention(q, k, v, bias=attnkit.biases.ALiBi(4))
    assert call_cache.info()["size"] == 0
    torch.testing.assert_close(got.double(), _oracle(q, k, v, M.padding_mask([5, 5], 24)), rtol=1e-5, atol=1e-5)


def test_the_cache_is_bounded():
    q, k, v = _qkv()
    for w in range(call_cache.MAX_ENTRIES + 5):
        attnkit.attention(q, k, v, mask=M.sliding_window(w, 0))
    assert call_cache.info()["size"] == call_cache.MAX_ENTRIES


def test_a_large_dense_mask_is_not_kept_alive(monkeypatch):
    import weakref

    monkeypatch.setattr(call_cache, "MAX_HELD_ELEMENTS", 100)
    q, k, v = _qkv()
    dense = torch.ones(1, 1, 24, 24, dtype=torch.bool).tril()  # 576 elements, over the limit here
    attnkit.attention(q, k, v, mask=dense)
    attnkit.attention(q, k, v, mask=M.padding_mask([24, 17], 24))  # (2, 24) = 48 elements: cached
    gone = weakref.ref(dense)
    del dense
    assert gone() is None and call_cache.info()["size"] == 1


def test_fresh_masks_every_call_keep_a_bounded_number_of_bytes_alive(monkeypatch):
    monkeypatch.setattr(call_cache, "MAX_HELD_BYTES", 3 * 24 * 24)  # three 24 x 24 bool masks
    q, k, v = _qkv()
    for i in range(6):
        dense = torch.ones(1, 1, 24, 24, dtype=torch.bool).tril(i)  # a new tensor per call
        ref = attnkit.attention(q, k, v, mask=dense, backend="reference").out
        torch.testing.assert_close(attnkit.attention(q, k, v, mask=dense).out, ref)
        torch.testing.assert_close(attnkit.attention(q, k, v, mask=dense).out, ref)  # a hit
        held = {id(t) for e in call_cache._CACHE.values() for t in e.held}
        assert len(held) <= 3 and call_cache._HELD <= call_cache.MAX_HELD_BYTES  # the oldest let go
        assert call_cache._HELD == sum(t.numel() for e in call_cache._CACHE.values() for t in e.held)
    call_cache.clear()
    assert call_cache._HELD == 0
