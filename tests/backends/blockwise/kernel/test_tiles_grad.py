"""The tiles route's backward from complete rows per block (:mod:`attnkit.backends.blockwise.kernel.tiles_grad`).

Checked against a float64 oracle (plain PyTorch autograd), within twice the error of that same
plain computation in float32 (flash-attention's rule; bf16: within the plain bf16 error), for
document masks that differ per batch row, chunks, prefix-LM with a prefix per batch row, key padding with L != S, GQA, a
gradient into the returned lse, and rows split into several sub-blocks; and the cases it must
hand back to the tile loop (returns None): a NaN in a key no query sees, blocks whose span is mostly
empty, spans too wide for a sub-block of MIN_ROWS rows.
"""

from __future__ import annotations

import pytest
import torch

from attnkit import masks as M
from attnkit.backends.blockwise import blockwise_attention
from attnkit.backends.blockwise.kernel import tiles_grad as fused_tiles_grad
from _routes import route_of
from attnkit.core.call import make_call

from _grad_oracle import grad_inputs, grads_of, max_err, oracle

B, H, HKV, E = 2, 4, 2, 16


def _docs(L):
    ids = torch.stack([torch.arange(L) * 3 // L, (torch.arange(L) * 5 // L + 1) % 7])  # 3 and 5 documents
    return M.document(ids)


CASES = {  # name: (mask factory of L, L, S)
    "document_per_batch": (_docs, 700, 700),
    "chunked": (lambda L: M.chunked(200), 600, 600),
    "prefix_lm_per_row": (lambda L: M.prefix_lm(torch.tensor([300, 170])), 640, 640),  # one prefix: its own route
    "padding_l_lt_s": (lambda L: M.padding_mask([600, 450], 600), 520, 600),
}


def _fused(mask, ran):
    def fn(q, k, v):
        res = blockwise_attention(make_call(q, k, v, mask=mask))
        assert "non-empty tiles" in res.report.reason
        return res.out, res.lse
    return fn


def _spy(monkeypatch):
    """Counts the calls span_grads served (returned gradients)."""
    served = []
    real = fused_tiles_grad.span_grads

    def spy(*a, **kw):
        res = real(*a, **kw)
        served.append(res is not None)
        return res
    monkeypatch.setattr("attnkit.backends.blockwise.routes.tiles.span_grads", spy)
    return served


@pytest.mark.parametrize("sub_blocks", [False, True], ids=["whole_blocks", "sub_blocks"])
@pytest.mark.parametrize("case", list(CASES))
def test_float32_gradients_within_twice_the_reference_error(monkeypatch, case, sub_blocks):
    make, L, S = CASES[case]
    mask = make(L)
    if sub_blocks:  # rows of a block in several sub-blocks, the last one short
        monkeypatch.setattr(fused_tiles_grad, "ROWS_ELEMS", 72 * B * H * S)
        monkeypatch.setattr(fused_tiles_grad, "MIN_ROWS", 8)
    served = _spy(monkeypatch)
    q, k, v, dout, dlse = grad_inputs((B, H, HKV, L, S, E))
    truth = grads_of(lambda *t: oracle(*t, mask), q, k, v, dout, dlse, torch.float64)
    ref = grads_of(lambda *t: oracle(*t, mask), q, k, v, dout, dlse, torch.float32)
    got = grads_of(_fused(mask, served), q, k, v, dout, dlse, torch.float32)
    assert served == [True]
    for name, a, r, t in zip("qkv", got, ref, truth):
        assert a.dtype == torch.float32 and a.shape == t.shape
        assert max_err(a, t) <= 2 * max_err(r, t) + 1e-6, (name, max_err(a, t), max_err(r, t))


@pytest.mark.parametrize("case", ["document_per_batch", "chunked"])
def test_bf16_gradients_within_the_plain_bf16_error(monkeypatch, case):
    make, L, S = CASES[case]
    mask = make(L)
    served = _spy(monkeypatch)
    q, k, v, dout, dlse = grad_inputs((B, H, HKV, L, S, E), magnitude=1.0, seed=2, dtype=torch.bfloat16)
    truth = grads_of(lambda *t: oracle(*t, mask), q, k, v, dout, dlse, torch.float64)
    ref = grads_of(lambda *t: oracle(*t, mask), q, k, v, dout, dlse, torch.bfloat16)
    got = grads_of(_fused(mask, served), q, k, v, dout, dlse, torch.bfloat16)
    assert served == [True]
    for a, r, t in zip(got, ref, truth):
        assert a.dtype == torch.bfloat16 and max_err(a, t) <= max_err(r, t)


def _route(q, k, v, mask):
    return route_of(make_call(q, k, v, mask=mask))


def test_a_nan_in_a_key_no_query_sees_goes_back_to_the_tile_loop(monkeypatch):
    make, L, S = CASES["padding_l_lt_s"]
    mask = make(L)
    q, k, v, dout, dlse = grad_inputs((B, H, HKV, L, S, E), seed=5)
    k[1, :, 500], v[1, :, 500] = float("nan"), float("nan")  # batch row 1 has 450 keys: 500 is padding
    route = _route(q, k, v, mask)
    _, lse = route.forward(q, k, v)
    assert fused_tiles_grad.span_grads(dout, q, k, v, lse, dlse, mask, route.segments, route.scale, (True,) * 3) is None
    served = _spy(monkeypatch)
    got = grads_of(_fused(mask, served), q, k, v, dout, dlse, torch.float32)
    assert served == [False] and all(bool(torch.isfinite(g).all()) for g in got)


def test_mostly_empty_spans_and_too_wide_spans_go_back_to_the_tile_loop(monkeypatch):
    L = S = 2048
    ends = M.custom(lambda b, h, qi, ki: (ki < 16) | (ki >= S - 16), name="first and last keys")
    q, k, v, dout, dlse = grad_inputs((B, H, HKV, L, S, E), seed=6)
    route = _route(q, k, v, ends)
    _, lse = route.forward(q, k, v)
    assert fused_tiles_grad.span_grads(dout, q, k, v, lse, dlse, ends, route.segments, route.scale, (True,) * 3) is None
    mask = M.chunked(1024)
    route = _route(q, k, v, mask)
    _, lse = route.forward(q, k, v)
    assert fused_tiles_grad.span_grads(dout, q, k, v, lse, dlse, mask, route.segments, route.scale, (True,) * 3) is not None
    monkeypatch.setattr(fused_tiles_grad, "ROWS_ELEMS", B * H * 1024 * 16)  # 16 rows < MIN_ROWS
    assert fused_tiles_grad.span_grads(dout, q, k, v, lse, dlse, mask, route.segments, route.scale, (True,) * 3) is None


def test_a_subset_of_the_gradients_equals_the_same_part_of_all_three():
    make, L, S = CASES["document_per_batch"]
    mask = make(L)
    q, k, v, dout, dlse = grad_inputs((B, H, HKV, L, S, E), seed=7)
    route = _route(q, k, v, mask)
    _, lse = route.forward(q, k, v)
    every = fused_tiles_grad.span_grads(dout, q, k, v, lse, dlse, mask, route.segments, route.scale, (True,) * 3)
    for need in [(True, False, False), (False, True, False), (False, False, True), (False, True, True)]:
        got = fused_tiles_grad.span_grads(dout, q, k, v, lse, dlse, mask, route.segments, route.scale, need)
        for n, a, b in zip(need, got, every):
            assert (a is None) if not n else torch.equal(a, b), need
