"""Blockwise under torch.func: the autograd.Function has ``setup_context`` and
``generate_vmap_rule``, and its forward and backward are functional (no writes into preallocated
buffers), so ``torch.func.vmap`` and ``torch.func.grad`` run it. Checked against a Python loop over
the vmapped dimension with ordinary autograd, in float64.
"""

from __future__ import annotations

import pytest
import torch

import attnkit
from _backend_cases import tiles
from attnkit import masks as M


def _attn(q, k, v, mask):
    return attnkit.attention(q, k, v, mask=mask, backend="blockwise").out


@pytest.mark.parametrize("mask", [None, M.causal(), M.sliding_window(3, 2)], ids=["none", "causal", "window"])
def test_vmap_and_grad_match_a_loop(mask):
    g = torch.Generator().manual_seed(0)
    N, B, H, Hkv, L, S, E = 3, 2, 4, 2, 19, 23, 8
    q = torch.randn(N, B, H, L, E, generator=g, dtype=torch.float64)
    k = torch.randn(N, B, Hkv, S, E, generator=g, dtype=torch.float64)
    v = torch.randn(N, B, Hkv, S, E, generator=g, dtype=torch.float64)
    w = torch.randn(B, H, L, E, generator=g, dtype=torch.float64)  # a fixed cotangent

    def loss(q, k, v):
        return (_attn(q, k, v, mask) * w).sum()

    with tiles(8, 8):  # several tiles, ragged edges, partial tiles
        out = torch.func.vmap(lambda q, k, v: _attn(q, k, v, mask))(q, k, v)
        grads = torch.func.vmap(torch.func.grad(loss, argnums=(0, 1, 2)))(q, k, v)
        for i in range(N):
            qi, ki, vi = (t[i].clone().requires_grad_(True) for t in (q, k, v))
            ref = attnkit.attention(qi, ki, vi, mask=mask, backend="reference").out
            torch.testing.assert_close(out[i], ref.detach())
            ref_g = torch.autograd.grad((ref * w).sum(), (qi, ki, vi))
            for got, exp in zip(grads, ref_g):
                torch.testing.assert_close(got[i], exp)


def test_vmap_over_one_argument_only():
    """Only v batched: per-block state must still be batched (no unbatched buffer to write into)."""
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 2, 10, 4, generator=g, dtype=torch.float64)
    k = torch.randn(1, 2, 12, 4, generator=g, dtype=torch.float64)
    v = torch.randn(5, 1, 2, 12, 4, generator=g, dtype=torch.float64)
    with tiles(4, 4):
        out = torch.func.vmap(lambda v: _attn(q, k, v, M.causal()))(v)
    for i in range(5):
        torch.testing.assert_close(out[i], attnkit.attention(q, k, v[i], mask=M.causal(), backend="reference").out)


COMPILE_CASES = {
    "none": lambda L: {},
    "causal": lambda L: {"mask": M.causal()},
    "window": lambda L: {"mask": M.sliding_window(2)},
    "padding": lambda L: {"mask": M.padding_mask(torch.tensor([5, 8]), L)},
    "document": lambda L: {"mask": M.document(torch.tensor([0] * 7 + [1] * 6 + [2] * (L - 13)))},
    "alibi": lambda L: {"bias": __import__("attnkit").biases.ALiBi(4)},
}


@pytest.mark.parametrize("case", list(COMPILE_CASES))
def test_compiles_with_fullgraph_forward_and_backward(case):
    """No value read on q, k, v, no .tolist() on traced tensors: fullgraph tracing succeeds (a graph
    break is an error) and the compiled forward and gradients equal the eager ones."""
    torch._dynamo.reset()
    L = 19
    kw = COMPILE_CASES[case](L)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, L, 16, generator=g, requires_grad=True) for _ in range(3))

    def f(q, k, v):
        return attnkit.attention(q, k, v, backend="blockwise", **kw).out

    try:
        with tiles(8, 8):
            got = torch.compile(f, fullgraph=True, backend="eager")(q, k, v)
            exp = f(q, k, v)
            torch.testing.assert_close(got, exp, rtol=1e-6, atol=1e-6)
            w = torch.randn(exp.shape, generator=g)
            for a, b in zip(torch.autograd.grad((got * w).sum(), (q, k, v)), torch.autograd.grad((exp * w).sum(), (q, k, v))):
                torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    finally:
        torch._dynamo.reset()


def test_compile_with_dropout_fullgraph_says_unsupported_and_graph_breaks_match_eager():
    """The dropout seed is a host int (every tile's keep-mask generator is seeded from it): fullgraph
    tracing fails with an error that names the reason; without fullgraph the seed is drawn outside
    the graph from torch's generator, so the same ``torch.manual_seed`` gives eager's output."""
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 19, 16, generator=g) for _ in range(3))

    def f(q, k, v):
        return attnkit.attention(q, k, v, backend="blockwise", dropout_p=0.3).out

    try:
        with tiles(8, 8):
            with pytest.raises(Exception, match=r"unsupported under torch.compile\(fullgraph=True\)"):
                torch.compile(f, fullgraph=True, backend="eager")(q, k, v)
            torch._dynamo.reset()
            torch.manual_seed(1)
            got = torch.compile(f, backend="eager")(q, k, v)
            torch.manual_seed(1)
            exp = f(q, k, v)
            torch.manual_seed(2)
            other = f(q, k, v)
        torch.testing.assert_close(got, exp)
        assert not torch.allclose(exp, other)  # the seed really comes from the generator
    finally:
        torch._dynamo.reset()


def test_blockwise_attention_returns_attention_output_like_attention():
    """The public entry point returns AttentionOutput (out, weights, lse, report),
    equal to attnkit.attention's blockwise result, with the fully-masked rows counted."""
    from attnkit.backends.blockwise import blockwise_attention
    from attnkit.core.call import make_call
    from attnkit.core.output import AttentionOutput

    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 6, 4, generator=g, dtype=torch.float64) for _ in range(3))
    mask = M.padding_mask(torch.tensor([0]), 6)  # every key dead: all 12 rows fully masked
    got = blockwise_attention(make_call(q, k, v, mask=M.causal(), return_weights=True), block_q=4, block_kv=4)
    exp = attnkit.attention(q, k, v, mask=M.causal(), return_weights=True, backend="blockwise")
    assert isinstance(got, AttentionOutput) and got.report.backend == "blockwise"
    for a, b in ((got.out, exp.out), (got.weights, exp.weights), (got.lse, exp.lse)):
        torch.testing.assert_close(a, b)
    dead = blockwise_attention(make_call(q, k, v, mask=mask))
    assert dead.report.fully_masked_rows == 12 and not dead.out.any()
