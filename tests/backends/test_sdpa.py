"""The sdpa backend (and reference beside it) under pressure: half precision within 2x the
reference's own error, nothing a mask removes leaking into outputs or gradients, NaN propagating
as on every other backend with an honest fully-masked count, and the log-sum-exp returned."""

from __future__ import annotations

import math

import pytest
import torch

import attnkit
from attnkit import biases, masks

HALF = [torch.bfloat16, torch.float16]


def _grads(q, k, v, dout, backend, **kw):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    res = attnkit.attention(q, k, v, backend=backend, **kw)
    grads = torch.autograd.grad(res.out, (q, k, v), dout.to(res.out.dtype))
    return res, [res.out.double()] + [g.double() for g in grads]


def _inputs(std, n=128, E=64, H=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, H, n, E, generator=g) * std for _ in range(3))
    return q, k, v, torch.randn(1, H, n, E, generator=g)


@pytest.mark.parametrize("dtype", HALF, ids=["bf16", "fp16"])
@pytest.mark.parametrize("bias", [None, "alibi"])
def test_half_precision_forward_and_backward_within_2x_the_reference(dtype, bias):
    # logits ~ ±100 (std-10 inputs, E = 64); the truth is float64 on the same rounded inputs
    q, k, v, dout = (t.to(dtype) for t in _inputs(10.0))
    kw = {"bias": biases.ALiBi(4)} if bias else {}
    _, truth = _grads(q.double(), k.double(), v.double(), dout.double(), "reference", **kw)
    _, ref = _grads(q, k, v, dout, "reference", **kw)
    _, got = _grads(q, k, v, dout, "sdpa", **kw)
    for name, t, r, g in zip(("out", "dq", "dk", "dv"), truth, ref, got):
        own = (r - t).abs().max().item()
        err = (g - t).abs().max().item()
        assert err <= 2 * own + 1e-6, f"{name}: sdpa error {err:.3g} > 2 x reference's {own:.3g}"


@pytest.mark.parametrize("backend", ["sdpa", "reference", "auto"])
@pytest.mark.parametrize("hostile", [math.nan, math.inf, -math.inf, 1e38])
@pytest.mark.parametrize("where", ["k", "v"])
def test_masked_keys_and_values_never_leak(backend, hostile, where):
    q, k, v, dout = _inputs(1.0, n=16, E=8)
    mask = masks.padding_mask(torch.tensor([11]), 16)  # keys 11.. are padding
    _, clean = _grads(q, k, v, dout, backend, mask=mask)
    kk, vv = k.clone(), v.clone()
    (kk if where == "k" else vv)[:, :, 11:] = hostile
    _, dirty = _grads(q, kk, vv, dout, backend, mask=mask)
    for name, a, b in zip(("out", "dq", "dk", "dv"), clean, dirty):
        assert torch.isfinite(b).all(), f"{name} not finite with {hostile} in masked {where}"
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6, msg=f"{name} changed by masked {where}")


@pytest.mark.parametrize("backend", ["sdpa", "reference"])
def test_hostile_bias_entries_under_the_mask_never_leak(backend):
    q, k, v, dout = _inputs(1.0, n=8, E=8, H=2)
    causal = masks.causal()
    bias = torch.randn(8, 8)
    _, clean = _grads(q, k, v, dout, backend, mask=causal, bias=bias)
    hostile = bias.masked_fill(torch.ones(8, 8, dtype=torch.bool).triu(1), math.nan)
    _, dirty = _grads(q, k, v, dout, backend, mask=causal, bias=hostile)
    for a, b in zip(clean, dirty):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6)


def test_top_left_causal_never_reads_the_keys_no_query_sees():
    q, k, v, dout = _inputs(1.0, n=8, E=8)
    k, v = torch.cat([k, k], 2), torch.cat([v, v], 2)  # S = 16 > L = 8: keys 8.. are seen by no query
    mask = masks.causal(align="top_left")
    _, clean = _grads(q, k, v, dout, "sdpa", mask=mask)
    v2 = v.clone()
    v2[:, :, 8:] = math.nan
    _, dirty = _grads(q, k, v2, dout, "sdpa", mask=mask)
    for a, b in zip(clean, dirty):
        torch.testing.assert_close(b, a)


def test_nan_propagates_as_on_the_other_backends_and_is_not_counted_as_masked():
    q, k, v, _ = _inputs(1.0, n=8, E=8)
    alibi = biases.ALiBi(4, slopes=torch.tensor([0.5, float("nan"), 0.25, 0.125]))
    outs = {b: attnkit.attention(q, k, v, bias=alibi, backend=b) for b in ("reference", "sdpa", "blockwise")}
    for b, r in outs.items():
        assert torch.isnan(r.out[:, 1]).all() and torch.isfinite(r.out[:, [0, 2, 3]]).all(), b
        assert int(r.report.fully_masked_rows) == 0, b


def test_rows_the_mask_empties_are_zero_and_counted():
    q, k, v, _ = _inputs(1.0, n=8, E=8)
    allowed = torch.ones(8, 8, dtype=torch.bool)
    allowed[3] = False  # query 3 sees nothing
    for b in ("reference", "sdpa", "blockwise"):
        r = attnkit.attention(q, k, v, mask=allowed, bias=biases.ALiBi(4), backend=b)
        assert (r.out[:, :, 3] == 0).all() and torch.isfinite(r.out).all(), b
        assert int(r.report.fully_masked_rows) == 4, b  # one row in each of 4 heads


@pytest.mark.parametrize("kw", [{}, {"mask": masks.causal()}, {"mask": masks.sliding_window(3)}, {"bias": biases.ALiBi(4)}])
def test_sdpa_returns_the_log_sum_exp_of_the_reference(kw):
    q, k, v, _ = _inputs(1.0, n=12, E=8)
    ref = attnkit.attention(q, k, v, backend="reference", **kw)
    got = attnkit.attention(q, k, v, backend="sdpa", **kw)
    assert got.lse is not None
    torch.testing.assert_close(got.lse, ref.lse, rtol=1e-5, atol=1e-5)


def test_a_3d_bias_tensor_is_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"t\[:, None\] for \(B, L, S\)"):
        biases.TensorBias(torch.randn(2, 4, 4))


@pytest.mark.parametrize("backend", ["reference", "sdpa"])
def test_vmap_and_grad_work_and_match_the_loop(backend):
    from torch.func import grad, vmap

    x = torch.randn(3, 1, 2, 6, 8)

    def f(t):
        return attnkit.attention(t, t, t, mask=masks.sliding_window(2), bias=biases.ALiBi(2), backend=backend).out

    torch.testing.assert_close(vmap(f)(x), torch.stack([f(t) for t in x]))
    g = grad(lambda t: f(t).square().sum())(x[0])
    t = x[0].clone().requires_grad_(True)
    f(t).square().sum().backward()
    torch.testing.assert_close(g, t.grad)
