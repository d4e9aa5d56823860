"""Relative-position biases on the blockwise backend's fused kernel
(:mod:`attnkit.backends.blockwise.routes.relative`) against a float64 oracle.

The oracle is the ``reference`` backend run on float64 copies of the inputs (bias and mask applied
densely). The flash-attention rule: the fused float32 result may be off the oracle by at most a
few times the ``reference`` backend's own float32 error on the same inputs. A small odd block size
is forced, so every call is split into many query blocks (and a short last one), as an 8k call is.
Every case checks the report, so a silent fall back to the tile loop fails the test, and calls the
route must not take (other biases and masks, bf16, hostile hidden values) must report the tile loop.
"""

from __future__ import annotations

import pytest
import torch

import attnkit
from _fused_bias_cases import errors, inputs, mask_of
from attnkit import biases
from attnkit import masks as M
from attnkit.backends.blockwise.routes import custom as fused_custom, relative as fused_relative

RELATIVE = fused_relative.RELATIVE.name
CUSTOM = fused_custom.CUSTOM.name  # every other additive bias


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(fused_relative, "RELATIVE_BLOCK", 7)  # many blocks, a short last one


def _bias(name, H):
    torch.manual_seed(3)
    if name == "alibi":
        return biases.ALiBi(H)
    if name == "t5":
        b = biases.T5RelativeBias(H, num_buckets=16, max_distance=40)
        with torch.no_grad():
            b.table.normal_(0, 1.0)
        return b
    if name == "t5_causal_top_left":
        return biases.T5RelativeBias(H, bidirectional=False, align="top_left")
    if name == "shaw":
        return biases.RelativePositionBias(H, max_distance=9)
    if name == "alibi+shaw":
        return [biases.ALiBi(H), biases.RelativePositionBias(H, max_distance=5)]
    if name == "custom":
        return biases.custom_bias(lambda b, h, q, kv: torch.sin(0.3 * q - 0.17 * kv + h), depends_on=("h",))
    raise ValueError(name)


SHAPES = [(2, 4, 2, 45, 45, 16), (1, 4, 4, 19, 50, 8), (2, 6, 3, 50, 23, 16)]  # GQA; L < S; L > S


@pytest.mark.parametrize("shape", SHAPES, ids=["gqa_square", "L<S", "L>S_gqa"])
@pytest.mark.parametrize("mask", ["none", "causal", "causal_top_left", "window"])
@pytest.mark.parametrize("bias", ["alibi", "t5", "shaw", "alibi+shaw", "t5_causal_top_left"])
def test_relative_bias_matches_the_float64_oracle(bias, mask, shape):
    B, H, Hkv, L, S, E = shape
    q, k, v = inputs(B, H, Hkv, L, S, E)
    err, err32, res = errors(q, k, v, _bias(bias, H), mask_of(mask, B, L, S))
    assert RELATIVE in res.report.reason
    assert err <= 3 * err32 + 1e-6, (err, err32)


@pytest.mark.parametrize("shape", SHAPES, ids=["gqa_square", "L<S", "L>S_gqa"])
@pytest.mark.parametrize("mask", ["none", "causal", "padding", "document", "window"])
@pytest.mark.parametrize("bias", ["custom", "alibi", "dense"])
def test_other_biases_and_masks_match_the_float64_oracle(bias, mask, shape):
    B, H, Hkv, L, S, E = shape
    q, k, v = inputs(B, H, Hkv, L, S, E)
    m = mask_of(mask, B, L, S)
    if bias == "dense":
        b = torch.randn(1, H, L, S, generator=torch.Generator().manual_seed(5))
    else:
        b = _bias(bias, H)
    err, err32, res = errors(q, k, v, b, m)
    # only a relative bias with a mask of key - query takes the relative route; the rest the custom one
    assert (RELATIVE if bias == "alibi" and mask in ("none", "causal", "window") else CUSTOM) in res.report.reason
    assert err <= 3 * err32 + 1e-6, (err, err32)


def test_fully_masked_rows_are_zero_with_lse_minus_inf():
    q, k, v = inputs(1, 2, 2, 30, 12, 8)
    res = attnkit.attention(q, k, v, bias=biases.ALiBi(2), mask=M.causal(), backend="blockwise")  # rows 0..17 see nothing
    assert RELATIVE in res.report.reason
    assert torch.equal(res.out[:, :, :18], torch.zeros_like(res.out[:, :, :18]))
    assert torch.isneginf(res.lse[:, :, :18]).all() and torch.isfinite(res.lse[:, :, 18:]).all()
    assert res.report.fully_masked_rows == 2 * 18


@pytest.mark.parametrize("bias", ["alibi", "t5", "custom"])
def test_gradcheck_float64(bias):
    q, k, v = (t.requires_grad_() for t in inputs(1, 2, 1, 9, 11, 4, dtype=torch.float64))
    b = _bias(bias, 2)
    mask = M.causal()
    assert (RELATIVE if bias != "custom" else CUSTOM) in attnkit.attention(q, k, v, bias=b, mask=mask, backend="blockwise").report.reason
    torch.autograd.gradcheck(lambda q, k, v: attnkit.attention(q, k, v, bias=b, mask=mask, backend="blockwise").out, (q, k, v))


def test_learned_table_gradient_matches_the_reference():
    q, k, v = inputs(2, 4, 2, 40, 40, 8, dtype=torch.float64)
    b = _bias("t5", 4)
    dout = torch.randn(2, 4, 40, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    grads = {}
    for backend in ("blockwise", "reference"):
        b.table.grad = None
        res = attnkit.attention(q, k, v, bias=b, mask=M.causal(), backend=backend)
        (res.out * dout).sum().backward()
        grads[backend] = b.table.grad.clone()
    assert torch.allclose(grads["blockwise"], grads["reference"], atol=1e-10, rtol=1e-9)


def test_float32_gradients_within_the_reference_error():
    q, k, v = inputs(1, 4, 2, 37, 37, 16)
    dout = torch.randn(1, 4, 37, 16, generator=torch.Generator().manual_seed(2))
    b = biases.ALiBi(4)

    def grads(dtype, backend):
        ins = [t.to(dtype).requires_grad_() for t in (q, k, v)]
        res = attnkit.attention(*ins, bias=b, mask=M.causal(), backend=backend)
        return torch.autograd.grad(res.out, ins, dout.to(dtype)), res

    fast, res = grads(torch.float32, "blockwise")
    assert RELATIVE in res.report.reason
    ref32, _ = grads(torch.float32, "reference")
    oracle, _ = grads(torch.float64, "reference")
    for f, r, o in zip(fast, ref32, oracle):
        assert (f.double() - o).abs().max() <= 3 * (r.double() - o).abs().max() + 1e-6


def test_double_backward_raises_a_clear_error():
    q, k, v = (t.requires_grad_() for t in inputs(1, 2, 2, 8, 8, 4, dtype=torch.float64))
    out = attnkit.attention(q, k, v, bias=biases.ALiBi(2), backend="blockwise").out
    (g,) = torch.autograd.grad(out.sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        g.sum().backward()


@pytest.mark.parametrize("garbage", [float("inf"), 1e38])
def test_hostile_values_the_mask_hides_leave_the_fused_route_and_never_leak(garbage):
    # causal with L > S: query rows 0..9 see no key; a huge value there would meet the kernel's -inf
    q, k, v = inputs(1, 2, 2, 30, 20, 8)
    clean = attnkit.attention(q, k, v, bias=biases.ALiBi(2), mask=M.causal(), backend="blockwise")
    assert RELATIVE in clean.report.reason
    q2 = q.clone()
    q2[:, :, :10] = garbage
    res = attnkit.attention(q2, k, v, bias=biases.ALiBi(2), mask=M.causal(), backend="blockwise")
    assert RELATIVE not in res.report.reason  # the tile loop (1e38), or the exact path (inf: needs_exact)
    assert torch.equal(res.out[:, :, :10], torch.zeros_like(res.out[:, :, :10]))
    assert torch.allclose(res.out[:, :, 10:], clean.out[:, :, 10:], atol=1e-5)


def test_bf16_and_explicit_tiles_keep_the_tile_loop():
    q, k, v = inputs(1, 2, 2, 16, 16, 8)
    res = attnkit.attention(*(t.bfloat16() for t in (q, k, v)), bias=biases.ALiBi(2), backend="blockwise")
    assert "tile loop" in res.report.reason
    with attnkit.options(block_q=8, block_kv=8):
        res = attnkit.attention(q, k, v, bias=biases.ALiBi(2), backend="blockwise")
    assert "tile loop" in res.report.reason
