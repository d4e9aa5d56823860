"""The fused routes' own backward (banded windows, causal, unmasked): renormalised weights, no tile loop.

The backward of the band, causal and dense fused routes rebuilds each row's weights from its own
score GEMM and renormalises them (:mod:`attnkit.backends.blockwise.kernel.band_grad`,
:mod:`attnkit.backends.blockwise.kernel.causal_grad`). Checked here against a float64 oracle
(plain PyTorch autograd) and the ``reference`` backend's own float32 error (flash-attention's
rule: at most twice it, plus a tiny atol):

* large scores (|s| ~ 50, where a float32 lse is off by ~3e-6 relative), GQA and MQA, L != S both
  ways, odd sizes that leave short and clipped edge blocks, strided q / k / v;
* the lse is only a shift: a wrong (finite) lse gives the same gradients;
* neither the tile loop nor PyTorch's private backward op runs in the backward;
* float64 ``gradcheck`` of out and lse together (the lse gradient path included);
* rows with no allowed key get zero, finite gradients.
"""

from __future__ import annotations

import pytest
import torch

import attnkit
from attnkit import masks as M
from attnkit.backends.blockwise import blockwise_attention
from attnkit.backends.blockwise.kernel import gate as fused_gate, lse_grads as fused_grad
from attnkit.backends.blockwise.kernel.band_grad import band_grads
from attnkit.backends.blockwise.kernel.causal_grad import causal_grads
from _routes import route_of
from attnkit.core.call import make_call

CASES = {  # mask, (B, H, Hkv, L, S, E), the route the call must take
    "window_gqa": (M.sliding_window(100, 0), (1, 4, 2, 301, 301, 16), "banded"),
    "window_both_sides_mqa": (M.sliding_window(20, 9), (2, 4, 1, 131, 131, 8), "banded"),
    "window_l_lt_s": (M.sliding_window(40, 3), (1, 2, 2, 97, 203, 8), "banded"),
    "window_top_left_l_gt_s": (M.sliding_window(150, 5, align="top_left"), (1, 2, 1, 229, 170, 16), "banded"),
    "causal_gqa": (M.causal(), (1, 4, 2, 259, 259, 16), "causal"),
    "causal_prefix": (M.causal(), (1, 2, 2, 97, 230, 8), "causal"),
    "causal_l_gt_s": (M.causal(), (1, 2, 1, 203, 97, 8), "causal"),
    "causal_top_left": (M.causal(align="top_left"), (1, 2, 2, 60, 200, 8), "causal"),
    "causal_top_left_l_gt_s": (M.causal(align="top_left"), (1, 2, 1, 300, 129, 8), "causal"),
    "none_l_ne_s": (None, (1, 4, 2, 77, 150, 16), "one call"),
}


def _inputs(shape, magnitude, seed=0, strided=False, dtype=torch.float32):
    B, H, Hkv, L, S, E = shape
    g = torch.Generator().manual_seed(seed)
    if strided:  # q as a (B, L, H, E) transpose; k, v as every other channel of a wider tensor
        q = torch.randn(B, L, H, E, generator=g).transpose(1, 2)
        k = torch.randn(B, Hkv, S, 2 * E, generator=g)[..., ::2]
        v = torch.randn(B, Hkv, S, 2 * E, generator=g)[..., 1::2]
    else:
        q, k, v = (torch.randn(B, h, n, E, generator=g) for h, n in ((H, L), (Hkv, S), (Hkv, S)))
    q, k = q * magnitude, k * magnitude
    return [t.to(dtype) for t in (q, k, v, torch.randn(B, H, L, E, generator=g))]


def _oracle(q, k, v, mask):
    """float64 (out, lse) by plain autograd; GQA by repeating kv heads, empty rows 0 / -inf."""
    g = q.shape[1] // k.shape[1]
    kk, vv = (t.repeat_interleave(g, 1) for t in (k, v))
    s = q @ kk.transpose(-1, -2) * q.shape[-1] ** -0.5
    if mask is not None:
        s = s.masked_fill(~mask.materialize(q.shape[2], k.shape[2]), float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - torch.where(torch.isneginf(lse), 0.0, lse).unsqueeze(-1))
    return p @ vv, lse


def _grads(q, k, v, dout, mask, backend):
    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
    if backend == "oracle":
        out, _ = _oracle(*(t.double() for t in leaves), mask)
        return None, torch.autograd.grad(out, leaves, dout.double())
    if backend == "blockwise":  # called directly: the report names the path that ran
        res = blockwise_attention(make_call(*leaves, mask=mask))
    else:
        res = attnkit.attention(*leaves, mask=mask, backend=backend)
    return res, torch.autograd.grad(res.out, leaves, dout)


def _err(a, b):
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "strided"])
@pytest.mark.parametrize("magnitude", [1.0, 4.0], ids=["scores_small", "scores_large"])
@pytest.mark.parametrize("case", list(CASES))
def test_float32_gradients_within_twice_the_reference_error(case, magnitude, strided):
    mask, shape, path = CASES[case]
    q, k, v, dout = _inputs(shape, magnitude, strided=strided)
    _, truth = _grads(q, k, v, dout, mask, "oracle")
    res, got = _grads(q, k, v, dout, mask, "blockwise")
    assert "fused kernel" in res.report.reason and path in res.report.reason
    _, ref = _grads(q, k, v, dout, mask, "reference")
    for name, a, r, t in zip("qkv", got, ref, truth):
        assert a.dtype == torch.float32 and a.shape == t.shape
        assert _err(a, t) <= 2 * _err(r, t) + 1e-6, (name, _err(a, t), _err(r, t))


@pytest.mark.parametrize("case", ["window_gqa", "window_both_sides_mqa", "causal_gqa", "causal_prefix", "none_l_ne_s"])
def test_the_lse_is_only_a_shift_the_weights_are_renormalised(case):
    mask, shape, _ = CASES[case]
    q, k, v, dout = _inputs(shape, 4.0, seed=1)
    route = route_of(make_call(q, k, v, mask=mask))
    _, lse = route.forward(q, k, v)
    need = (True, True, True)

    def grads(shift):
        if route.kind == "band":
            return band_grads(dout, q, k, v, shift, None, mask, route.band, route.scale, need)
        return causal_grads(dout, q, k, v, shift, None, route.causal_off, route.scale, need)

    # a backward that trusts the lse (weights exp(s - lse)) would scale every gradient by e^-0.3
    for a, b in zip(grads(lse), grads(lse + 0.3)):
        assert _err(a, b) <= 1e-5 * float(a.abs().max())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("case", ["window_gqa", "causal_prefix", "none_l_ne_s"])
def test_neither_the_tile_loop_nor_the_private_backward_op_runs(monkeypatch, case, dtype):
    def refuse(*args, **kwargs):
        raise AssertionError("the backward of this route must not call this")

    fused_gate.available(dtype)  # the self-test (which calls the backward op) before the patch
    monkeypatch.setattr(fused_grad, "loop_backward", refuse)
    monkeypatch.setattr(fused_gate, "backward_op", refuse)
    mask, shape, path = CASES[case]
    q, k, v, dout = _inputs(shape, 1.0, dtype=dtype)
    res, grads = _grads(q, k, v, dout, mask, "blockwise")
    assert path in res.report.reason
    _, truth = _grads(q, k, v, dout, mask, "oracle")
    for g, t in zip(grads, truth):
        assert g.dtype == dtype and _err(g, t) <= (0.05 if dtype == torch.bfloat16 else 1e-4) * float(t.abs().max())


@pytest.mark.parametrize("case", ["window_both_sides", "window_one_side", "causal_prefix", "causal_l_gt_s", "none"])
def test_float64_gradcheck_of_out_and_lse(case):
    mask, (L, S) = {
        "window_both_sides": (M.sliding_window(20, 3), (70, 70)),
        "window_one_side": (M.sliding_window(9, 0), (41, 45)),
        "causal_prefix": (M.causal(), (13, 29)),
        "causal_l_gt_s": (M.causal(), (29, 13)),
        "none": (None, (11, 19)),
    }[case]
    g = torch.Generator().manual_seed(7)
    q = torch.randn(1, 2, L, 4, generator=g, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(1, 1, S, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    assert "fused kernel" in blockwise_attention(make_call(q, k, v, mask=mask)).report.reason

    def fn(q, k, v):
        res = blockwise_attention(make_call(q, k, v, mask=mask))
        return res.out, torch.where(torch.isneginf(res.lse), 0.0, res.lse)

    assert torch.autograd.gradcheck(fn, (q, k, v), eps=1e-6, atol=1e-8)


@pytest.mark.parametrize("mask", [M.causal(), M.sliding_window(10, 0)], ids=["causal", "window"])
def test_rows_with_no_allowed_key_get_zero_finite_gradients(mask):
    q, k, v, dout = _inputs((1, 2, 2, 150, 60, 8), 3.0, seed=3)  # L > S: the first 90 queries see no key
    res, grads = _grads(q, k, v, dout, mask, "blockwise")
    assert "fused kernel" in res.report.reason
    empty = ~mask.materialize(150, 60)[0, 0].any(-1)
    assert int(empty.sum()) == 90
    assert all(torch.isfinite(t).all() for t in grads)
    assert torch.equal(grads[0][:, :, empty], torch.zeros_like(grads[0][:, :, empty]))
    _, truth = _grads(q, k, v, dout, mask, "oracle")
    for a, t in zip(grads, truth):
        assert _err(a, t) <= 1e-4 * float(t.abs().max())
