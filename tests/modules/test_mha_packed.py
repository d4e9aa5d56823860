"""MultiHeadAttention with packed input (``cu_seqlens``) equals the same module run on each sequence alone.

Each sequence alone is a (1, L_i, D) batch through the padded path, so rotary positions and position
biases start at 0 there; the packed call must give the same outputs and the same parameter gradients
(float64, 1e-12). Without rotary, the per-sequence truth is also ``torch.nn.MultiheadAttention``
(an implementation outside attnkit) with the same weights.
"""

from __future__ import annotations

import pytest
import torch

import attnkit
from attnkit import biases as Bi
from attnkit import masks as M

LENGTHS = [5, 1, 0, 9, 5, 12]


def cu(lengths):
    return torch.tensor([0, *lengths]).cumsum(0)


def module(**kw):
    torch.manual_seed(0)
    m = attnkit.MultiHeadAttention(32, 4, **kw).double()
    if m.sinks is not None:
        with torch.no_grad():
            m.sinks.normal_()
    return m


def packed_and_alone(m, x, lengths, **call):
    out, w = m(x, cu_seqlens=cu(lengths), **call)
    assert w is None
    c = cu(lengths).tolist()
    alone = torch.cat([m(x[c[i]:c[i + 1]][None], **call)[0][0] for i in range(len(lengths)) if lengths[i] > 0])
    return out, alone


def param_grads(m, out, seed=2):
    go = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=out.dtype)
    return torch.autograd.grad(out, [p for p in m.parameters()], go, allow_unused=True)


CONFIGS = {
    "rotary_gqa_causal": (dict(kv_heads=2, rotary=attnkit.RotaryEmbedding(8)), dict(causal=True)),
    "sinks_window": (dict(sinks=True), dict(causal=True, mask=M.sliding_window(left=2))),
    "alibi_bidirectional": (dict(), dict(bias=Bi.ALiBi(4))),
    "mqa_interleaved_rotary": (dict(kv_heads=1, rotary=attnkit.RotaryEmbedding(8, interleaved=True)), dict(causal=True)),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_packed_equals_each_sequence_alone(name):
    build, call = CONFIGS[name]
    m = module(**build)
    x = torch.randn(sum(LENGTHS), 32, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    out, alone = packed_and_alone(m, x, LENGTHS, **call)
    assert out.shape == (sum(LENGTHS), 32)
    torch.testing.assert_close(out, alone, rtol=0, atol=1e-12)
    for a, b in zip(param_grads(m, out), param_grads(m, alone)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_rotary_positions_restart():
    """Two copies of one sequence packed together give the same rows twice (positions restart at 0)."""
    m = module(rotary=attnkit.RotaryEmbedding(8))
    seq = torch.randn(6, 32, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    out, _ = m(torch.cat([seq, seq]), cu_seqlens=cu([6, 6]), causal=True)
    torch.testing.assert_close(out[:6], out[6:], rtol=0, atol=1e-12)


def test_rotary_table_covers_the_longest_sequence_not_the_pack():
    """RoPE scores depend on position differences only, so what restarting positions changes is the range:
    a pack longer than the rotary table works when every sequence fits in it."""
    m = module(rotary=attnkit.RotaryEmbedding(8, max_positions=16))
    lengths = [10, 12, 9]  # 31 packed tokens, each sequence < 16
    x = torch.randn(sum(lengths), 32, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    out, alone = packed_and_alone(m, x, lengths, causal=True)
    torch.testing.assert_close(out, alone, rtol=0, atol=1e-12)


def test_equals_torch_multihead_attention_per_sequence():
    m = module()
    ref = m.to_torch()
    x = torch.randn(sum(LENGTHS), 32, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    out, _ = m(x, cu_seqlens=cu(LENGTHS), causal=True)
    c = cu(LENGTHS).tolist()
    want = []
    for i, n in enumerate(LENGTHS):
        if n == 0:
            continue
        xi = x[c[i]:c[i + 1]][None]
        future = torch.ones(n, n, dtype=torch.bool).triu(1)  # torch: True = not allowed
        want.append(ref(xi, xi, xi, attn_mask=future, need_weights=False)[0][0])
    torch.testing.assert_close(out, torch.cat(want), rtol=0, atol=1e-12)


def test_packed_cross_attention():
    m = module()
    lq, lk = [3, 4, 2], [5, 1, 6]
    g = torch.Generator().manual_seed(5)
    x = torch.randn(sum(lq), 32, generator=g, dtype=torch.float64)
    mem = torch.randn(sum(lk), 32, generator=g, dtype=torch.float64)
    out, _ = m(x, mem, cu_seqlens=cu(lq), cu_seqlens_k=cu(lk))
    cq, ck = cu(lq).tolist(), cu(lk).tolist()
    alone = torch.cat([m(x[cq[i]:cq[i + 1]][None], mem[ck[i]:ck[i + 1]][None])[0][0] for i in range(3)])
    torch.testing.assert_close(out, alone, rtol=0, atol=1e-12)


def test_packed_refuses_padded_arguments():
    m = module()
    x = torch.randn(7, 32, dtype=torch.float64)
    c = cu([3, 4])
    with pytest.raises(ValueError, match="key_padding_mask cannot be combined with cu_seqlens"):
        m(x, cu_seqlens=c, key_padding_mask=torch.zeros(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="need_weights cannot be combined"):
        m(x, cu_seqlens=c, need_weights=True)
    with pytest.raises(ValueError, match="cache cannot be combined"):
        m(x, cu_seqlens=c, cache=attnkit.cache.DynamicCache())
    with pytest.raises(ValueError, match="must have 2 dims \\(T, D\\)"):
        m(x[None], cu_seqlens=c)
    with pytest.raises(ValueError, match="must end at query.shape\\[0\\]"):
        m(x, cu_seqlens=cu([3, 3]))
    with pytest.raises(ValueError, match="without cu_seqlens"):
        m(x, cu_seqlens_k=c)
    with pytest.raises(ValueError, match="needs cu_seqlens_k"):
        m(x, x.clone(), cu_seqlens=c)
