"""Which grid the tiles route classifies a mask on (:func:`attnkit.backends.blockwise.kernel.tiles.segments_of`).

The route takes tiles of 256 keys, or of 128 where the mask's structure is finer and that grid
computes clearly fewer pairs. Checked: the grid each kind of mask gets; that every allowed pair
lies in a segment of its query block, whatever the grid (hypothesis, against the mask's own
values); that the finer grid never computes more weighted pairs than the coarse one; that it is
not taken where it would cost the backward its span path; and that calls on the finer grid are
exact, forward and backward, against a float64 oracle (twice the float32 reference's own error).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnkit
from attnkit import masks as M
from attnkit.backends.blockwise.kernel import tiles as fused_tiles
from attnkit.backends.blockwise.kernel.tiles import BLOCK, FINE_BLOCK, _segments_on, _weighted, segments_of

from _grad_oracle import grad_inputs, grads_of, max_err, oracle


def _block(segs) -> int:
    return segs.blocks[0][1] - segs.blocks[0][0]


def _docs(n: int, length: int):
    return M.document(torch.arange(n) // length)


@pytest.mark.parametrize("make, n, block", [
    (lambda n: _docs(n, 128), 512, FINE_BLOCK),  # documents of 128 keys: four FULL 128-tiles
    (lambda n: M.prefix_lm(128), 512, FINE_BLOCK),  # a causal diagonal in 128-tiles wastes less
    (lambda n: _docs(n, 1024), 4096, BLOCK),  # documents of 1024 keys: the same pairs, fewer calls
    (lambda n: M.padding_mask([n, 3 * n // 4], n), 512, BLOCK),  # whole keys: nothing to gain
    (lambda n: M.chunked(1024), 4096, BLOCK),  # 0.9 of the pairs: not worth the shorter blocks
], ids=["docs128", "prefix_lm128", "docs1024", "padding", "chunked1024"])
def test_each_mask_gets_the_grid_that_pays(make, n, block):
    segs = segments_of(make(n), n, n)
    assert _block(segs) == block
    if block == FINE_BLOCK:
        coarse = _segments_on(make(n), n, n, BLOCK)
        assert _weighted(segs) <= fused_tiles.FINE_GAIN * _weighted(coarse)


def test_documents_of_128_keys_compute_a_quarter_of_the_pairs():
    segs = segments_of(_docs(512, 128), 512, 512)
    assert segs.pairs == 512 * 512 // 4 and all(full for *_, ss in segs.blocks for *_, full in ss)


def test_the_finer_grid_is_not_taken_where_it_would_lose_the_span_backward():
    # per-row documents whose tile states are PARTIAL far from the diagonal on the 128 grid: its
    # blocks' spans would hold empty gaps, and the backward would fall back to the tile loop
    L = 700
    mask = M.document(torch.stack([torch.arange(L) * 3 // L, (torch.arange(L) * 5 // L + 1) % 7]))
    fine = _segments_on(mask, L, L, FINE_BLOCK)
    assert _weighted(fine) <= fused_tiles.FINE_GAIN * _weighted(_segments_on(mask, L, L, BLOCK))
    assert fine.spans() is None
    chosen = segments_of(mask, L, L)
    assert _block(chosen) == BLOCK and chosen.spans() is not None


@given(lengths=st.lists(st.integers(1, 300), min_size=1, max_size=8), extra=st.integers(0, 200))
def test_every_allowed_pair_lies_in_a_segment_of_its_block(lengths, extra):
    ids = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    n = len(ids)
    masks = [M.document(ids), M.prefix_lm(min(extra, n)), M.chunked(max(1, extra))]
    for mask in masks:
        segs = segments_of(mask, n, n)
        allowed = mask.materialize(n, n)[0, 0]
        covered = torch.zeros(n, n, dtype=torch.bool)
        for q0, q1, ss in segs.blocks:
            for k0, k1, full in ss:
                covered[q0:q1, k0:k1] = True
                if full:
                    assert bool(allowed[q0:q1, k0:k1].all())
        assert not bool((allowed & ~covered).any())
        coarse = _segments_on(mask, n, n, BLOCK)
        assert _weighted(segs) <= _weighted(coarse)


def _assert_exact(mask, shape, seed=0, reason=None):
    """Gradients of the blockwise call within twice the float32 reference's error against the float64
    oracle, and its output likewise; ``reason`` a text its report must name."""
    q, k, v, dout, dlse = grad_inputs(shape, seed=seed)

    def fused(q, k, v):
        res = attnkit.attention(q, k, v, mask=mask, backend="blockwise")
        assert reason is None or reason in res.report.reason
        return res.out, res.lse

    truth = grads_of(lambda *t: oracle(*t, mask), q, k, v, dout, dlse, torch.float64)
    ref = grads_of(lambda *t: oracle(*t, mask), q, k, v, dout, dlse, torch.float32)
    got = grads_of(fused, q, k, v, dout, dlse, torch.float32)
    for name, a, r, t in zip("qkv", got, ref, truth):
        assert max_err(a, t) <= 2 * max_err(r, t) + 1e-6, (name, max_err(a, t), max_err(r, t))
    with torch.no_grad():
        out_t, _ = oracle(*(t.double() for t in (q, k, v)), mask)
        out_r, _ = oracle(q, k, v, mask)
        out = attnkit.attention(q, k, v, mask=mask, backend="blockwise").out
    assert max_err(out, out_t) <= 2 * max_err(out_r, out_t) + 1e-6


# a prefix per batch row: one prefix length has its own route (fused_prefix_lm), not the tiles
@pytest.mark.parametrize("make", [lambda n: _docs(n, 128), lambda n: M.prefix_lm(torch.tensor([128, 128]))],
                         ids=["docs128", "prefix_lm128_per_row"])
def test_calls_on_the_finer_grid_are_exact_forward_and_backward(make):
    n = 512
    mask = make(n)
    assert _block(segments_of(mask, n, n)) == FINE_BLOCK
    _assert_exact(mask, (2, 4, 2, n, n, 16), reason="non-empty tiles")


@settings(max_examples=12)
@given(lengths=st.lists(st.integers(40, 200), min_size=2, max_size=6), seed=st.integers(0, 1000))
def test_random_documents_are_exact_on_whichever_grid_they_get(lengths, seed):
    ids = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    n = len(ids)
    _assert_exact(M.document(ids), (1, 4, 2, n, n, 16), seed=seed)
