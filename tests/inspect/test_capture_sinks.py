"""capture / dense_weights / tiled_row_summaries honour attention sinks and soft-capping.

The oracle is independent of attnkit's sink code: a float64 softmax over the S keys plus one
explicit extra column holding the sink logit, whose share is then dropped (its value is zero).
"""

from __future__ import annotations

import math

import pytest
import torch

import attnkit
from attnkit.core import hooks
from attnkit.core.call import make_call
from attnkit.core.softcap import softcap
from attnkit.inspect.capture import capture, dense_weights, tiled_row_summaries
from attnkit.inspect.metrics import row_summaries_from_weights
from attnkit.modules.multihead import MultiHeadAttention

M, Bi = attnkit.masks, attnkit.biases
FIELDS = ("entropy", "max_weight", "topk_weights", "sink_mass", "distance", "mass")


def _oracle(q, k, sinks, *, scale, mask=None, alibi=None, cap=None):
    """Weights (B, H, L, S) in float64 from a softmax over S + 1 columns, the last being the sink."""
    q, k = q.double(), k.double()
    B, H, L, _ = q.shape
    S = k.shape[2]
    kx = k.repeat_interleave(H // k.shape[1], dim=1)
    s = torch.einsum("bhle,bhse->bhls", q, kx) * scale
    if alibi is not None:
        s = s + alibi.materialize(L, S, batch=B, heads=H, dtype=s.dtype)
    if cap is not None:
        s = cap * torch.tanh(s / cap)
    if mask is not None:
        s = s.masked_fill(~mask.materialize(L, S, batch=B, heads=H), float("-inf"))
    sink = sinks.double().reshape(-1, H, sinks.shape[-1] if sinks.dim() == 3 else 1).expand(B, H, L)
    full = torch.cat([s, sink[..., None]], -1)  # (B, H, L, S + 1)
    return torch.softmax(full, -1)[..., :S]


def _inputs(B, H, Hkv, L, S, dtype=torch.float64, seed=0, spread=2.0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, L, 8, generator=g, dtype=dtype) * spread
    k = torch.randn(B, Hkv, S, 8, generator=g, dtype=dtype) * spread
    v = torch.randn(B, Hkv, S, 8, generator=g, dtype=dtype)
    return q, k, v


CASES = {
    # (B, H, Hkv, L, S, mask, sinks shape)
    "per_head": (2, 4, 2, 21, 21, None, "H"),
    "causal_L<S": (1, 4, 4, 13, 30, M.causal(), "H"),
    "per_row": (2, 2, 1, 17, 17, M.sliding_window(4, 0), "BHL"),
    "fully_masked_rows": (1, 2, 2, 9, 9, M.causal("top_left") & M.custom(lambda b, h, q, kv: q != 3, depends_on=()), "H"),
}


def _sinks(kind, B, H, L, dtype):
    g = torch.Generator().manual_seed(7)
    shape = (H,) if kind == "H" else (B, H, L)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * 2 + 1).to(dtype)


@pytest.mark.parametrize("case", CASES)
def test_dense_and_tiled_match_an_explicit_sink_column(case):
    B, H, Hkv, L, S, mask, kind = CASES[case]
    q, k, v = _inputs(B, H, Hkv, L, S)
    sinks = _sinks(kind, B, H, L, torch.float64)
    call = make_call(q, k, v, mask=mask, sinks=sinks)
    ref = _oracle(q, k, sinks, scale=call.scale, mask=mask)
    assert float(ref.sum(-1).max()) < 1.0  # the sink really takes a share

    w = dense_weights(call)
    assert torch.allclose(w, ref, atol=1e-12, rtol=1e-12), (w - ref).abs().max()

    # tiny tiles: several query blocks, ragged key blocks, skipped empty tiles
    tiled = tiled_row_summaries(call, k=4, sink_positions=(0, 2), tile_elements=B * H * 4 * 8, kv_block=8)
    want = row_summaries_from_weights(ref, 4, sink_positions=(0, 2), offset=S - L)
    for f in FIELDS:
        a, b = getattr(tiled, f), getattr(want, f)
        assert torch.allclose(a, b, atol=1e-10, rtol=1e-10), (f, (a - b).abs().max())


def test_summary_mass_is_one_minus_the_sink_share():
    q, k, v = _inputs(1, 2, 2, 6, 6)
    sinks = torch.tensor([0.5, -1.0], dtype=torch.float64)
    call = make_call(q, k, v, sinks=sinks)
    s = q @ k.transpose(-1, -2) * call.scale
    share = torch.exp(sinks.view(1, 2, 1) - torch.logaddexp(torch.logsumexp(s, -1), sinks.view(1, 2, 1)))
    assert torch.allclose(tiled_row_summaries(call).mass, 1 - share, atol=1e-12)


def test_softcap_and_sinks_together_in_float32():
    """float32 inputs: the error against the float64 oracle stays within a few times the error of
    the same oracle computed in float32."""
    B, H, L, S, cap = 2, 4, 24, 24, 3.0
    q, k, v = _inputs(B, H, H, L, S, dtype=torch.float32, seed=3, spread=3.0)
    sinks = _sinks("H", B, H, L, torch.float32)
    bias = [Bi.ALiBi(H), softcap(cap)]
    call = make_call(q, k, v, mask=M.causal(), bias=bias, sinks=sinks)
    kw = dict(scale=call.scale, mask=M.causal(), alibi=Bi.ALiBi(H))
    ref = _oracle(q, k, sinks, cap=cap, **kw)
    assert (ref - _oracle(q, k, sinks, **kw)).abs().max() > 1e-2  # the cap changes the weights

    # the oracle's own float32 error
    s32 = torch.einsum("bhle,bhse->bhls", q, k) * call.scale + Bi.ALiBi(H).materialize(L, S, batch=B, heads=H, dtype=torch.float32)
    s32 = (cap * torch.tanh(s32 / cap)).masked_fill(~M.causal().materialize(L, S, batch=B, heads=H), float("-inf"))
    full32 = torch.cat([s32, sinks.view(1, H, 1, 1).expand(B, H, L, 1)], -1)
    own = float((torch.softmax(full32, -1)[..., :S].double() - ref).abs().max())
    tol = 8 * max(own, torch.finfo(torch.float32).eps)

    w = dense_weights(call).double()
    assert (w - ref).abs().max() <= tol
    tiled = tiled_row_summaries(call, k=3, tile_elements=B * H * 8 * 8, kv_block=8)
    want = row_summaries_from_weights(ref, 3, offset=0)
    for f in ("max_weight", "topk_weights", "mass", "sink_mass"):
        assert (getattr(tiled, f).double() - getattr(want, f)).abs().max() <= tol, f
    # entropy and distance are sums of S terms: their error grows with S and the distances
    assert (tiled.entropy.double() - want.entropy).abs().max() <= tol * S * math.log(S)
    assert (tiled.distance.double() - want.distance).abs().max() <= tol * S * S


class _Grab:
    """Keeps every finished attnkit call (an observer independent of capture)."""

    def __init__(self):
        self.calls = []

    def __call__(self, call, out):
        self.calls.append(call)


@pytest.mark.parametrize("record", ["weights", "summaries"])
def test_capture_of_a_module_with_sinks(record):
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4, kv_heads=2, sinks=True).double()
    with torch.no_grad():
        mha.sinks.copy_(torch.tensor([2.0, -1.0, 0.5, 3.0]))
    x = torch.randn(2, 11, 32, dtype=torch.float64)
    grab = _Grab()
    with hooks.add_observer(grab), capture(mha, record=record, k=3) as rec:
        mha(x, causal=True)
    (call,) = grab.calls
    ref = _oracle(call.q, call.k, mha.sinks.detach(), scale=call.scale, mask=M.causal())
    want = row_summaries_from_weights(ref, 3)
    got = rec.summaries[0]
    if record == "weights":
        assert torch.allclose(rec.attentions[0], ref, atol=1e-12)
    else:
        assert rec[0].weights is None
    for f in FIELDS:
        assert torch.allclose(getattr(got, f), getattr(want, f), atol=1e-10), f
    assert float(got.mass.max()) < 1.0


def test_capture_keeps_returned_weights_with_sinks():
    """A call that returns its weights is recorded as returned: already scaled by the sink."""
    q, k, v = _inputs(1, 2, 2, 5, 5)
    sinks = torch.tensor([1.0, -0.5], dtype=torch.float64)
    with capture(None, record="auto") as rec:
        res = attnkit.attention(q, k, v, sinks=sinks, return_weights=True, backend="reference")
    ref = _oracle(q, k, sinks, scale=q.shape[-1] ** -0.5)
    assert torch.allclose(res.weights, ref, atol=1e-12)
    assert torch.allclose(rec.attentions[0], ref, atol=1e-12)
