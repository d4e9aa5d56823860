"""The prefix-LM route on the fused kernel (:mod:`attnkit.backends.blockwise.routes.prefix_lm`).

Checked against a float64 oracle (plain PyTorch autograd on the materialized mask): in float64 at
1e-10 on every split of rows the route can make (empty prefix, a prefix longer than the keys, rows
before the first key when L > S, rows past the last key with top-left alignment, both
alignments, GQA), in float32 within twice the error of the same plain computation in float32
(the flash-attention rule; also at |lse| ~ 350 with exact scores), in bf16 within twice SDPA's own
bf16 error; a gradient into the returned lse; the report names the route; a prefix given per
batch row keeps the tile route; the cost model estimates the route.
"""

from __future__ import annotations

import itertools

import pytest
import torch

import attnkit
from attnkit import masks as M
from attnkit.backends.blockwise import blockwise_attention
from attnkit.backends.blockwise.kernel.causal import dense_forward
from attnkit.backends.blockwise.routes.prefix_lm import PREFIX_LM
from attnkit.core.call import make_call

from _grad_oracle import grad_inputs, grads_of, max_err, oracle
from _routes import route_of

ROUTE = PREFIX_LM.name


def _blockwise(mask):
    def fn(q, k, v):
        res = blockwise_attention(make_call(q, k, v, mask=mask))
        assert ROUTE in res.report.reason
        return res.out, res.lse
    return fn


def _plain(mask):
    return lambda q, k, v: oracle(q, k, v, mask)


GRID = list(itertools.product([1, 7, 150], [1, 9, 203], [0, 1, 60, 300], ["bottom_right", "top_left"]))


@pytest.mark.parametrize("L,S,P,align", GRID, ids=[f"L{a}_S{b}_P{c}_{d}" for a, b, c, d in GRID])
def test_float64_forward_and_gradients_match_the_oracle(L, S, P, align):
    q, k, v, dout, dlse = grad_inputs((2, 4, 2, L, S, 16), seed=L + S + P, dtype=torch.float64)
    mask = M.prefix_lm(P, align)
    out, lse = _blockwise(mask)(q, k, v)
    want, want_lse = oracle(q, k, v, mask)
    assert max_err(out, want) < 1e-12
    assert torch.equal(torch.isneginf(lse), torch.isneginf(want_lse))
    fin = torch.isfinite(want_lse)
    assert max_err(lse[fin], want_lse[fin]) < 1e-12
    for got, ref in zip(grads_of(_blockwise(mask), q, k, v, dout, dlse, torch.float64),
                        grads_of(_plain(mask), q, k, v, dout, dlse, torch.float64)):
        assert max_err(got, ref) < 1e-10


@pytest.mark.parametrize("L,S,P,align", [(300, 300, 100, "bottom_right"), (120, 400, 250, "bottom_right"),
                                         (400, 150, 60, "top_left"), (257, 257, 0, "bottom_right")])
def test_float32_within_twice_the_plain_float32_error(L, S, P, align):
    q, k, v, dout, dlse = grad_inputs((1, 4, 1, L, S, 32), magnitude=3.0, seed=7)
    mask = M.prefix_lm(P, align)
    truth = [oracle(*(t.double() for t in (q, k, v)), mask)[0],
             *grads_of(_plain(mask), q, k, v, dout, dlse, torch.float64)]
    got = [_blockwise(mask)(q, k, v)[0], *grads_of(_blockwise(mask), q, k, v, dout, dlse, torch.float32)]
    plain = [oracle(q, k, v, mask)[0], *grads_of(_plain(mask), q, k, v, dout, dlse, torch.float32)]
    for a, r, t in zip(got, plain, truth):
        assert max_err(a, t) <= 2 * max_err(r, t) + 1e-6


def test_bfloat16_within_twice_sdpas_own_error():
    q, k, v, dout, _ = grad_inputs((1, 4, 4, 300, 300, 64), magnitude=1.0, seed=3)
    mask = M.prefix_lm(90)
    truth = [oracle(*(t.double() for t in (q, k, v)), mask)[0]]
    leaves = [t.double().requires_grad_(True) for t in (q, k, v)]
    truth += torch.autograd.grad(oracle(*leaves, mask)[0], leaves, dout.double())
    mine = [t.bfloat16().requires_grad_(True) for t in (q, k, v)]
    out = _blockwise(mask)(*mine)[0]
    assert out.dtype == torch.bfloat16
    got = [out.detach(), *torch.autograd.grad(out, mine, dout.bfloat16())]
    theirs = [t.bfloat16().requires_grad_(True) for t in (q, k, v)]
    sd = torch.nn.functional.scaled_dot_product_attention(*theirs, attn_mask=mask.materialize(300, 300))
    ref = [sd.detach(), *torch.autograd.grad(sd, theirs, dout.bfloat16())]
    for a, r, t in zip(got, ref, truth):
        assert max_err(a, t) <= 2 * max_err(r, t) + 1e-3


def test_large_logits_within_twice_the_reference_error():
    # exact scores (halves of integers up to 15, scale 1/2) put |lse| near 350; with a cached
    # prefix (L < S) the causal rows merge two parts relative to a row shift
    g = torch.Generator().manual_seed(11)
    q, k = (torch.randint(-30, 31, (1, 2, n, 4), generator=g).float() / 2 for n in (200, 500))
    v = torch.randn(1, 2, 500, 4, generator=g)
    mask = M.prefix_lm(380)
    res = attnkit.attention(q, k, v, mask=mask, backend="blockwise")
    assert ROUTE in res.report.reason
    ref = attnkit.attention(q, k, v, mask=mask, backend="reference")
    truth = attnkit.attention(q.double(), k.double(), v.double(), mask=mask, backend="reference")
    assert truth.lse.abs().max() > 300  # the case is what it claims
    assert max_err(res.out, truth.out) <= 2 * max_err(ref.out, truth.out) + 1e-7


def test_rows_past_the_last_key_see_every_key():
    # dense_forward with query 0 at key 3 and 10 queries against 8 keys: rows 5.. sit at key
    # position 8 or later (the causal rows of a top-left prefix-LM with L > S)
    q, k, v, *_ = grad_inputs((1, 2, 2, 10, 8, 8), seed=2, dtype=torch.float64)
    out, lse = dense_forward(q, k, v, 8 ** -0.5, 3)
    allowed = torch.arange(8)[None, :] <= torch.arange(10)[:, None] + 3
    want, want_lse = oracle(q, k, v, M.TensorMask(allowed))
    assert max_err(out, want) < 1e-12 and max_err(lse, want_lse) < 1e-12


def test_a_prefix_per_batch_row_keeps_the_tile_route():
    q, k, v, *_ = grad_inputs((2, 2, 2, 64, 64, 8))
    assert route_of(make_call(q, k, v, mask=M.prefix_lm(torch.tensor([5, 30])))).kind == "tiles"
    assert route_of(make_call(q, k, v, mask=M.prefix_lm(30))).kind == "prefix_lm"
    assert route_of(make_call(q, k, v, mask=M.KeyPrefixMask(30) | M.sliding_window(8, 0))).kind == "tiles"


def test_the_cost_model_estimates_the_route_below_the_tile_route():
    from attnkit.backends.blockwise.routes.tiles import TILES

    q, k, v, *_ = grad_inputs((1, 8, 8, 4096, 4096, 64))
    call = make_call(q, k, v, mask=M.prefix_lm(1024))
    mine = PREFIX_LM.estimate(call)
    tiles = TILES.estimate(call)  # the route the mask took before it had its own
    assert mine["path"] == ROUTE and 0 < mine["time_s"] < tiles["time_s"]
