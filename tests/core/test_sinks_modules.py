"""``MultiHeadAttention(..., sinks=True)``: one learned, zero-initialised sink logit per head, used in
the plain, the cached (decoding) and the cross-attention paths, checked against the explicit
concatenation oracle of :mod:`test_sinks` applied to the module's own projections (float64)."""

from __future__ import annotations

import pytest
import torch

from attnkit import MultiHeadAttention
from attnkit import cache as C
from test_sinks import oracle

D, H, HKV = 24, 4, 2


def _mha(**kw):
    torch.manual_seed(0)
    m = MultiHeadAttention(D, H, kv_heads=HKV, sinks=True, dtype=torch.float64, **kw)
    with torch.no_grad():
        m.sinks.copy_(torch.tensor([1.5, -0.5, 0.0, 2.5], dtype=torch.float64))  # learned values, not the init
    return m


def _x(B, L, seed=1):
    return torch.randn(B, L, D, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _expected(m, query, key, allowed):
    q, k, v = m.project(query, key, key)
    out, _, _ = oracle(q, k, v, m.sinks, allowed)
    return m.merge(out)


def test_sinks_are_a_zero_initialised_parameter_per_head():
    m = MultiHeadAttention(D, H, sinks=True)
    assert isinstance(m.sinks, torch.nn.Parameter) and m.sinks.shape == (H,)
    assert torch.equal(m.sinks, torch.zeros(H))
    assert "sinks" in dict(m.named_parameters())
    assert MultiHeadAttention(D, H).sinks is None
    assert "sinks=True" in repr(m)
    with pytest.raises(TypeError, match="sinks must be True or False"):
        MultiHeadAttention(D, H, sinks="yes")
    with pytest.raises(ValueError, match="no attention sinks"):
        m.to_torch()


def test_plain_self_attention_with_padding_and_its_gradients():
    m = _mha()
    x = _x(2, 6)
    am = torch.tensor([[1] * 6, [1] * 4 + [0] * 2])  # Hugging Face convention: 1 = token
    out, _ = m(x, attention_mask=am, causal=True)
    allowed = torch.ones(6, 6, dtype=torch.bool).tril()[None, None] & am.bool()[:, None, None, :]
    want = _expected(m, x, x, allowed)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-12)
    g_out = torch.autograd.grad(out.sum(), m.sinks)[0]
    g_want = torch.autograd.grad(want.sum(), m.sinks)[0]
    assert g_out.abs().min() > 0
    torch.testing.assert_close(g_out, g_want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["dynamic", "static"])
def test_cached_decoding_equals_the_full_causal_pass(kind):
    m = _mha().eval()
    x = _x(2, 7)
    full, _ = m(x, causal=True)
    cache = C.DynamicCache() if kind == "dynamic" else C.StaticCache(16)
    with torch.no_grad():
        steps = [m(x[:, :3], cache=cache, causal=True)[0]] + [m(x[:, i:i + 1], cache=cache, causal=True)[0] for i in range(3, 7)]
    torch.testing.assert_close(torch.cat(steps, 1), full.detach(), rtol=0, atol=1e-12)


def test_cross_attention_cached_and_not():
    m = _mha().eval()
    x, enc = _x(2, 3), _x(2, 5, seed=2)
    out, _ = m(x, enc)
    torch.testing.assert_close(out, _expected(m, x, enc, None), rtol=0, atol=1e-12)
    cache = C.CrossAttentionCache()
    with torch.no_grad():
        first = m(x[:, :2], enc, cache=cache)[0]
        second = m(x[:, 2:], cache=cache)[0]
    torch.testing.assert_close(torch.cat([first, second], 1), out.detach(), rtol=0, atol=1e-12)


def test_weights_returned_per_head_leave_room_for_the_sink():
    m = _mha()
    _, w = m(_x(1, 5), causal=True, need_weights=True, average_attn_weights=False)
    sums = w.sum(-1)  # (1, H, L): 1 - the sink's share
    assert bool((sums < 1).all())
    # the head with the largest sink logit gives it the most
    assert int(sums.mean(-1).argmin()) == int(m.sinks.argmax())
