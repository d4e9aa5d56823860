"""The block-local pieces of ring attention, alone: blockwise forward + LSE merge equals softmax,
the blockwise backward equals autograd, and fully masked rows give zeros, never NaN."""

from __future__ import annotations

import math

import pytest
import torch

from attnkit.distributed import block as block_module
from attnkit.distributed.block import block_backward, block_forward, block_mask, group_queries, merge_partials, row_chunks


@pytest.fixture(params=["whole", "row_chunks"])
def chunking(request, monkeypatch):
    """Run each block either whole or in chunks of 16 query rows (the path long shards take)."""
    if request.param == "row_chunks":
        monkeypatch.setattr(block_module, "SCORE_ELEMENTS", 1)
    return request.param


def _plain(q, k, v, allowed):
    """float64 softmax attention with GQA by repetition; fully masked rows -> 0 (reference)."""
    G = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~allowed, float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)  # softmax of an all -inf row is NaN: define it as 0
    return p @ v


def _inputs(seed=0, B=2, H=6, Hkv=2, L=10, S=12, E=5, Ev=3):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    return mk(B, H, L, E), mk(B, Hkv, S, E), mk(B, Hkv, S, Ev), mk(B, H, L, Ev)


def _blockwise(q, k, v, allowed, blocks):
    """Forward over key blocks [a, b), in the given order, merged by LSE as the ring does."""
    qg = group_queries(q, k.shape[1])
    out = torch.zeros(*qg.shape[:-1], v.shape[-1], dtype=q.dtype)
    lse = torch.full(qg.shape[:-1], float("-inf"), dtype=q.dtype)
    for a, b in blocks:
        o_b, l_b = block_forward(qg, k[:, :, a:b], v[:, :, a:b], scale=q.shape[-1] ** -0.5, allowed=allowed[:, a:b])
        out, lse = merge_partials(out, lse, o_b, l_b)
    return out, lse


# the last order is reversed: blocks arrive out of position order around a ring
@pytest.mark.parametrize("blocks", [[(0, 12)], [(0, 5), (5, 12)], [(0, 1), (1, 2), (2, 7), (7, 12)], [(7, 12), (0, 7)]])
@pytest.mark.parametrize("causal", [False, True])
def test_blockwise_forward_matches_softmax(blocks, causal, chunking):
    q, k, v, _ = _inputs(L=40)
    pos_q, pos_k = torch.arange(-28, 12), torch.arange(12)  # 40 queries (2+ row chunks) ending at the last key
    allowed = block_mask(pos_q, pos_k, causal=causal, seq_len=11)  # and position 11 is padding
    out, _ = _blockwise(q, k, v, allowed, blocks)
    B, H, L, _ = q.shape
    torch.testing.assert_close(out.reshape(B, H, L, -1), _plain(q, k, v, allowed), rtol=1e-12, atol=1e-12)


def test_fully_masked_rows_are_zero_not_nan():
    q, k, v, dout = _inputs(L=4, S=4)
    allowed = torch.zeros(4, 4, dtype=torch.bool)
    allowed[1:, :2] = True  # row 0 sees nothing
    qg = group_queries(q, k.shape[1])
    out, lse = block_forward(qg, k, v, scale=0.5, allowed=allowed)
    assert torch.isfinite(out).all() and (out[..., 0, :] == 0).all()
    assert torch.isneginf(lse[..., 0]).all() and torch.isfinite(lse[..., 1:]).all()
    # merging two empty partials stays empty; merging with an empty partial changes nothing
    empty_out, empty_lse = torch.zeros_like(out), torch.full_like(lse, float("-inf"))
    o2, l2 = merge_partials(empty_out, empty_lse, empty_out, empty_lse)
    assert (o2 == 0).all() and torch.isneginf(l2).all()
    o3, l3 = merge_partials(empty_out, empty_lse, out, lse)
    torch.testing.assert_close(o3, out, rtol=0, atol=0)
    torch.testing.assert_close(l3, lse, rtol=0, atol=0)
    dog = group_queries(dout, k.shape[1])
    dq, dk, dv = block_backward(qg, k, v, dog, lse, (dog * out).sum(-1), scale=0.5, allowed=allowed)
    assert all(torch.isfinite(t).all() for t in (dq, dk, dv))
    assert (dq[..., 0, :] == 0).all()


@pytest.mark.parametrize("causal", [False, True])
def test_blockwise_backward_matches_autograd(causal, chunking):
    q, k, v, dout = _inputs(L=40)
    allowed = block_mask(torch.arange(-28, 12), torch.arange(12), causal=causal, seq_len=11)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    _plain(*leaves, allowed).backward(dout)
    out, lse = _blockwise(q, k, v, allowed, [(0, 5), (5, 12)])
    qg, dog = group_queries(q, k.shape[1]), group_queries(dout, k.shape[1])
    delta = (dog * out).sum(-1)
    dq = torch.zeros_like(qg)
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    for a, b in [(0, 5), (5, 12)]:  # per key block, with the *final* lse
        dq_b, dk_b, dv_b = block_backward(
            qg, k[:, :, a:b], v[:, :, a:b], dog, lse, delta, scale=q.shape[-1] ** -0.5, allowed=allowed[:, a:b]
        )
        dq += dq_b
        dk[:, :, a:b] += dk_b
        dv[:, :, a:b] += dv_b
    for got, leaf in zip((dq.reshape(q.shape), dk, dv), leaves, strict=True):
        torch.testing.assert_close(got, leaf.grad, rtol=1e-10, atol=1e-12)


def test_row_chunks_cover_the_rows_within_the_budget():
    q = torch.zeros(2, 2, 3, 100, 4)  # B·Hkv·G = 12 score rows per query row
    chunks = row_chunks(q, lk=10, budget=12 * 10 * 32)
    assert chunks[0] == (0, 32) and chunks[-1] == (96, 100)
    assert [a for a, _ in chunks[1:]] == [b for _, b in chunks[:-1]]  # contiguous, no gap or overlap
    assert row_chunks(q, lk=10, budget=1) == [(i, min(i + 16, 100)) for i in range(0, 100, 16)]  # 16-row floor


def test_low_precision_inputs_accumulate_in_float32():
    q, k, v, _ = (t.to(torch.bfloat16) for t in _inputs())
    out, lse = block_forward(group_queries(q, 2), k, v, scale=0.3)
    assert out.dtype == torch.float32 and lse.dtype == torch.float64  # the row lse is never rounded to float32
