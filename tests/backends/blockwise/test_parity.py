"""The blockwise backend against the reference backend, forward and backward.

Truth is the reference in float64; each fp32 backend's error is measured against it, and blockwise
must stay within a small multiple of the reference's own fp32 error (flash-attention's test idea:
a tolerance that means something). Float64 ``gradcheck`` checks the custom backward directly.
"""

from __future__ import annotations

import itertools

import pytest
import torch

import attnkit
from _backend_cases import BIASES, MASKS, SCORES, make_qkv, tiles
from attnkit import masks as M

B, H, L, S, E, Ev = 2, 4, 37, 45, 16, 12
GQA = [4, 2, 1]  # Hkv: MHA, GQA, MQA


def _shape(Hkv):
    return (B, H, Hkv, L, S, E, Ev)


def _params(*objs):
    out = []
    for o in objs:
        if isinstance(o, torch.nn.Module):
            out += [p for p in o.parameters() if p.requires_grad]
        elif isinstance(o, (list, tuple)):
            out += _params(*o)
    return out


def _run(backend, q, k, v, *, dout, params=(), **kw):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    for p in params:
        p.grad = None
    res = attnkit.attention(q, k, v, backend=backend, **kw)
    res.out.backward(dout.to(res.out.dtype))
    grads = [q.grad, k.grad, v.grad] + [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in params]
    return res, grads


def _err(a, b):
    return (a.double() - b.double()).abs().max().item()


def check_parity(q64, k64, v64, *, params=(), **kw):
    dout = torch.randn(q64.shape[:3] + (v64.shape[-1],), generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    truth, g_truth = _run("reference", q64, k64, v64, dout=dout, params=params, **kw)
    ref32, g_ref = _run("reference", q64.float(), k64.float(), v64.float(), dout=dout, params=params, **kw)
    bw32, g_bw = _run("blockwise", q64.float(), k64.float(), v64.float(), dout=dout, params=params, **kw)
    assert bw32.report.backend == "blockwise"
    pairs = [("out", truth.out, ref32.out, bw32.out)]
    pairs += [(f"grad{i}", a, b, c) for i, (a, b, c) in enumerate(zip(g_truth, g_ref, g_bw))]
    for name, t, r, b in pairs:
        assert torch.isfinite(b).all(), f"{name} has non-finite values"
        # fp32 rounding floor: scalar parameter gradients sum thousands of terms, and the reference
        # may be lucky to one ulp where a tiled sum order is not
        floor = 2e-5 * max(1.0, t.abs().max().item())
        assert _err(b, t) <= 4 * _err(r, t) + floor, f"{name}: blockwise err {_err(b, t):.3g} vs reference fp32 err {_err(r, t):.3g}"
    # lse: -inf exactly where the reference has -inf, close elsewhere
    assert torch.equal(torch.isneginf(bw32.lse), torch.isneginf(truth.lse))
    fin = torch.isfinite(truth.lse)
    assert _err(bw32.lse[fin], truth.lse[fin]) <= 4 * _err(ref32.lse[fin], truth.lse[fin]) + 1e-6
    assert bw32.report.fully_masked_rows == truth.report.fully_masked_rows
    return truth, bw32


MASK_NAMES, BIAS_NAMES, SCORE_NAMES = list(MASKS), list(BIASES), list(SCORES)


def _case(score_name, mask_name, bias_name, Hkv, seed=0):
    s = _shape(Hkv)
    q, k, v = make_qkv(*s, seed=seed)
    torch.manual_seed(seed)
    score, mask, bias = SCORES[score_name](s), MASKS[mask_name](s), BIASES[bias_name](s)
    with tiles():
        check_parity(q, k, v, score=score, mask=mask, bias=bias, params=_params(score, bias))


@pytest.mark.parametrize("mask_name,bias_name", list(itertools.product(MASK_NAMES, BIAS_NAMES)))
def test_masks_x_biases(mask_name, bias_name):
    # every mask meets every bias; scores and GQA rotate so every score meets many masks too
    i = MASK_NAMES.index(mask_name) * len(BIAS_NAMES) + BIAS_NAMES.index(bias_name)
    _case(SCORE_NAMES[i % len(SCORE_NAMES)], mask_name, bias_name, GQA[i % len(GQA)])


@pytest.mark.parametrize("score_name,mask_name", list(itertools.product(SCORE_NAMES, MASK_NAMES)))
def test_scores_x_masks(score_name, mask_name):
    i = SCORE_NAMES.index(score_name) * len(MASK_NAMES) + MASK_NAMES.index(mask_name)
    _case(score_name, mask_name, BIAS_NAMES[(i * 5) % len(BIAS_NAMES)], GQA[(i + 1) % len(GQA)], seed=1)


def test_fully_masked_rows_give_zeros_and_finite_grads():
    q, k, v = make_qkv(B, H, 2, L, S, E, Ev)
    mask = M.padding_mask(torch.tensor([30, 0]), S) & M.causal()  # batch row 1 has no valid key
    with tiles():
        truth, bw = check_parity(q, k, v, mask=mask)
    assert bw.report.fully_masked_rows == H * L  # batch row 1 has no valid key
    assert torch.equal(bw.out[1], torch.zeros_like(bw.out[1]))
    assert torch.isneginf(bw.lse[1]).all()


def test_whole_call_masked_out():
    q, k, v = (t.requires_grad_() for t in make_qkv(1, 2, 2, 9, 11, 8, 8, dtype=torch.float32))
    with tiles(4, 4):
        res = attnkit.attention(q, k, v, mask=attnkit.masks.custom(lambda b, h, qi, kv: kv < 0), backend="blockwise")
    res.out.sum().backward()
    assert torch.equal(res.out, torch.zeros_like(res.out))
    assert all(torch.equal(t.grad, torch.zeros_like(t)) for t in (q, k, v))


@pytest.mark.parametrize("L_,S_,bq,bk", [(1, 1, 8, 8), (5, 70, 4, 16), (70, 5, 16, 4), (33, 33, 32, 32), (64, 64, 16, 16)])
def test_ragged_and_exact_tile_edges(L_, S_, bq, bk):
    q, k, v = make_qkv(1, 2, 1, L_, S_, 8, 8)
    with tiles(bq, bk):
        check_parity(q, k, v, mask=attnkit.masks.causal(), bias=attnkit.biases.ALiBi(2))
        check_parity(q, k, v)


def test_return_weights_match_reference_and_are_differentiable():
    q, k, v = make_qkv(1, 4, 2, 21, 29, 8, 8)
    bias = BIASES["t5"](_shape(2))
    kw = dict(mask=attnkit.masks.sliding_window(6, 3), bias=bias, return_weights=True)
    leaves = {}
    outs = {}
    for be in ("reference", "blockwise"):
        qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
        with tiles():
            res = attnkit.attention(qq, kk, vv, backend=be, **kw)
        (res.weights.square().sum() + res.out.sum()).backward()
        outs[be], leaves[be] = res.weights, (qq.grad, kk.grad, vv.grad)
    assert torch.allclose(outs["blockwise"], outs["reference"], atol=1e-12)
    for a, b in zip(leaves["blockwise"], leaves["reference"]):
        assert torch.allclose(a, b, atol=1e-10)


def test_bf16_close_to_reference():
    q, k, v = make_qkv(1, 4, 2, 300, 300, 32, 32, dtype=torch.float32)
    kw = dict(mask=attnkit.masks.causal(), bias=attnkit.biases.ALiBi(4))
    truth = attnkit.attention(q.double(), k.double(), v.double(), backend="reference", **kw).out
    ref = attnkit.attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), backend="reference", **kw).out
    bw = attnkit.attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), backend="blockwise", **kw).out
    assert bw.dtype == torch.bfloat16
    assert _err(bw, truth) <= 3 * _err(ref, truth) + 1e-3
