"""The fused tiles path's cached segment masks: right for predicates that are not translation
invariant, invalidated when the predicate or its captured tensors change, bounded in bytes.

Every output is compared with a float64 oracle computed here (dense softmax over the predicate
evaluated on the whole index grid), with a tolerance of a few times the float32 reference's own
error on the same inputs."""

from __future__ import annotations

import pytest
import torch

import attnkit
from attnkit.backends.blockwise.kernel import gate as fused_gate, segment_masks as SM
from _routes import route_of
from attnkit.core.call import make_call

pytestmark = pytest.mark.skipif(not fused_gate.available(torch.float32), reason="fused CPU kernel not available")

N = 640  # 3 query blocks of 256 (the last one short): interior and edge segments


def oracle(q, k, v, pred):
    """float64 attention with ``pred(b, h, q_idx, kv_idx)`` evaluated densely; empty rows give 0."""
    B, H, L, _ = q.shape
    S = k.shape[2]
    b = torch.arange(B).view(B, 1, 1, 1)
    h = torch.arange(H).view(1, H, 1, 1)
    qi = torch.arange(L).view(1, 1, L, 1)
    ki = torch.arange(S).view(1, 1, 1, S)
    allowed = pred(b, h, qi, ki).expand(B, H, L, S)
    s = (q.double() @ k.double().transpose(-1, -2)) / q.shape[-1] ** 0.5
    s = s.masked_fill(~allowed, float("-inf"))
    m = s.amax(-1, keepdim=True).nan_to_num(neginf=0.0)
    p = (s - m).exp()
    return (p / p.sum(-1, keepdim=True).clamp_min(1e-300)) @ v.double()


def own_error(q, k, v, pred):
    """The float32 reference backend's error against the oracle: the yardstick for the fused path."""
    ref32 = attnkit.attention(q, k, v, mask=pred, backend="reference").out
    return (ref32.double() - oracle(q, k, v, pred)).abs().max().item()


def check(q, k, v, pred):
    call = make_call(q, k, v, mask=pred)
    route = route_of(call)
    assert route is not None and route.kind == "tiles"
    out = attnkit.attention(q, k, v, mask=pred, backend="blockwise").out
    err = (out.double() - oracle(q, k, v, pred)).abs().max().item()
    assert err <= 4 * own_error(q, k, v, pred) + 1e-6, err
    return out


def qkv(B=1, H=2, n=N, E=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, n, E, generator=g) for _ in range(3)]


@pytest.fixture(autouse=True)
def fresh_cache():
    SM.clear_cache()
    yield
    SM.clear_cache()


def test_window_masks_are_stored_once_along_the_diagonal():
    q, k, v = qkv(n=2048)
    window = lambda b, h, qi, ki: (ki <= qi) & (qi - ki < 256)  # noqa: E731
    check(q, k, v, window)
    info = SM.cache_info()
    assert info["misses"] > 0 and info["distinct"] < info["entries"]
    check(q, k, v, window)  # the second call is served from the cache, with the same result
    assert SM.cache_info()["hits"] >= info["entries"]


def test_a_document_mask_by_captured_ids_is_exact_and_follows_in_place_changes():
    q, k, v = qkv()
    g = torch.Generator().manual_seed(1)
    docs = torch.randint(0, 4, (N,), generator=g)  # unsorted ids: segments differ from block to block
    doc = lambda b, h, qi, ki: docs[qi] == docs[ki]  # noqa: E731
    first = check(q, k, v, doc)
    docs[::3] = (docs[::3] + 1) % 4  # in place: a new version of the captured tensor
    second = check(q, k, v, doc)
    assert not torch.equal(first, second)


def test_a_random_predicate_is_exact_on_every_call():
    q, k, v = qkv(seed=2)
    g = torch.Generator().manual_seed(3)
    table = torch.rand(N, N, generator=g) < 0.3
    table[:, 0] = True  # every row sees a key
    rnd = lambda b, h, qi, ki: table[qi, ki]  # noqa: E731
    for _ in range(2):
        check(q, k, v, rnd)


def test_a_new_function_object_is_not_served_the_old_masks():
    q, k, v = qkv(seed=4)
    for w in (40, 300, 7):  # each a new lambda, possibly at a reused address, same code object
        pred = lambda b, h, qi, ki, w=w: (ki <= qi) & (qi - ki < w)  # noqa: E731
        check(q, k, v, pred)
        del pred


def test_a_predicate_reading_b_gets_its_masks_per_batch_row():
    q, k, v = qkv(B=2, seed=5)
    lengths = torch.tensor([N, 300])
    pad = lambda b, h, qi, ki: (ki < lengths[b]) & (ki <= qi)  # noqa: E731
    check(q, k, v, pad)
    check(q, k, v, pad)


def test_a_nan_in_a_key_no_query_sees_does_not_leak():
    q, k, v = qkv(seed=6)
    k[:, :, 300] = float("nan")
    v[:, :, 300] = float("nan")
    hide = lambda b, h, qi, ki: (ki <= qi) & (ki != 300)  # noqa: E731
    out = attnkit.attention(q, k, v, mask=hide, backend="blockwise").out
    assert torch.isfinite(out).all()
    k[:, :, 300] = 0.0
    v[:, :, 300] = 0.0
    ref = oracle(q, k, v, hide)
    assert (out.double() - ref).abs().max().item() <= 4 * own_error(q, k, v, hide) + 1e-6


def test_gradients_with_cached_masks_match_float64():
    q, k, v = qkv(seed=7)
    g = torch.Generator().manual_seed(8)
    docs = torch.sort(torch.randint(0, 3, (N,), generator=g)).values
    doc = lambda b, h, qi, ki: (docs[qi] == docs[ki]) & (ki <= qi)  # noqa: E731
    dout = torch.randn(q.shape, generator=g)
    for _ in range(2):  # the second call's forward and backward read cached masks
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        (attnkit.attention(*leaves, mask=doc, backend="blockwise").out * dout).sum().backward()
        ref = [t.double().clone().requires_grad_() for t in (q, k, v)]
        (oracle(*ref, doc) * dout.double()).sum().backward()
        ref32 = [t.clone().requires_grad_() for t in (q, k, v)]
        (attnkit.attention(*ref32, mask=doc, backend="reference").out * dout).sum().backward()
        for got, r64, r32 in zip(leaves, ref, ref32):
            tol = 4 * (r32.grad.double() - r64.grad).abs().max().item() + 1e-6
            assert (got.grad.double() - r64.grad).abs().max().item() <= tol


def test_the_cache_stays_within_its_byte_bound(monkeypatch):
    monkeypatch.setattr(SM, "CACHE_BYTES", 1 << 20)
    q, k, v = qkv(n=2048, seed=9)
    g = torch.Generator().manual_seed(10)
    table = torch.rand(2048, 2048, generator=g) < 0.5  # every segment distinct
    table[:, 0] = True
    rnd = lambda b, h, qi, ki: table[qi, ki]  # noqa: E731
    out = attnkit.attention(q, k, v, mask=rnd, backend="blockwise").out
    assert SM.cache_info()["bytes"] <= 1 << 20
    torch.testing.assert_close(out.double(), oracle(q, k, v, rnd), rtol=0, atol=4 * own_error(q, k, v, rnd) + 1e-6)


def test_a_hash_collision_is_caught_by_content(monkeypatch):
    monkeypatch.setattr(SM, "_digest", lambda allowed: 0)  # every mask collides
    q, k, v = qkv(seed=11)
    g = torch.Generator().manual_seed(12)
    docs = torch.randint(0, 3, (N,), generator=g)
    doc = lambda b, h, qi, ki: docs[qi] == docs[ki]  # noqa: E731
    for _ in range(2):
        check(q, k, v, doc)
