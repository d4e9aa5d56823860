"""Gradients of learned attention inputs are as precise in float32 as a plain float32 softmax, on
every backend: attention sinks (whose gradient took 1 - sigmoid(lse - sink) by subtraction, up to
10^6 times a plain softmax's error where the sink is far below lse) and T5's relative-bias table.

Errors are measured against the same computation in float64 and compared with a dense float32
softmax's own error on the same inputs, summed over seeds (a single seed's ratio varies 0.2-3×
for every implementation, the plain one included).

Shape legend: q (B, H, L, E), k and v (B, H, S, E); sinks (H,).
"""

from __future__ import annotations

import pytest
import torch

import attnkit
from attnkit import biases, masks

BACKENDS = ("reference", "sdpa", "blockwise", "auto")
H = 2


def _naive_sink_grads(q, k, v, sinks, dout):
    """Gradients of a plain softmax over [scores, sink] (the sink one more column with a zero value)."""
    sc = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5  # (B, H, L, S)
    col = sinks.view(1, -1, 1, 1).expand(*sc.shape[:-1], 1)
    w = torch.cat([sc, col], -1).softmax(-1)[..., :-1]
    return torch.autograd.grad(((w @ v) * dout).sum(), (q, k, v, sinks))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sink", [-20.0, -10.0, 0.0])
def test_sink_gradients_in_float32_are_as_precise_as_a_plain_softmax(backend, sink):
    """Error of the float32 gradients against float64, summed over 3 seeds, within 8× that of a
    float32 softmax with the sink as a column (before: 3e4-6e6× for sinks far below lse)."""
    errs, naive = [0.0] * 4, [0.0] * 4
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        x64 = [torch.randn(1, H, 32, 16, generator=g, dtype=torch.float64) for _ in range(3)]
        s64 = sink + torch.randn(H, generator=g, dtype=torch.float64)
        dout = torch.randn(1, H, 32, 16, generator=g, dtype=torch.float64)
        exact = _naive_sink_grads(*(t.clone().requires_grad_() for t in (*x64, s64)), dout)
        plain = _naive_sink_grads(*(t.float().requires_grad_() for t in (*x64, s64)), dout.float())
        ins = [t.float().requires_grad_() for t in (*x64, s64)]
        out = attnkit.attention(*ins[:3], sinks=ins[3], backend=backend).out
        got = torch.autograd.grad((out * dout.float()).sum(), ins)
        for i in range(4):
            errs[i] += float((got[i].double() - exact[i]).abs().max())
            naive[i] += float((plain[i].double() - exact[i]).abs().max())
    for i, name in enumerate("qkvs"):
        assert errs[i] <= 8 * naive[i] + 1e-30, f"d{name}: error {errs[i]:.3g}, plain float32 softmax {naive[i]:.3g}"


def _t5_table_grad(bias, q, k, v, dout, mask, backend, dtype):
    """The T5 table's gradient, run in ``dtype`` (the table cast with the inputs), as float64."""
    bias.to(dtype)
    bias.table.grad = None
    if backend == "plain":  # a dense float softmax over scores + materialized bias, by autograd
        qd, kd = q.to(dtype), k.to(dtype)
        sc = (qd @ kd.transpose(-1, -2)) * q.shape[-1] ** -0.5 + bias.materialize(q.shape[2], k.shape[2], dtype=dtype)
        sc = sc.masked_fill(~mask.materialize(q.shape[2], k.shape[2]), float("-inf"))
        out = sc.softmax(-1) @ v.to(dtype)
    else:
        out = attnkit.attention(q.to(dtype), k.to(dtype), v.to(dtype), bias=bias, mask=mask, backend=backend).out
    (out * dout.to(dtype)).sum().backward()
    grad = bias.table.grad.double().clone()
    bias.double()
    return grad


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("std", [0.02, 3.0])
def test_t5_table_gradients_in_float32_are_as_precise_as_a_plain_softmax(backend, std):
    """Summed over 4 seeds, the float32 table gradient's error against float64 stays within 3× a
    dense float32 softmax's (single seeds vary 0.2-3.3× on every backend, the plain one included)."""
    errs = naive = 0.0
    for seed in range(4):
        torch.manual_seed(seed)
        bias = biases.T5RelativeBias(4, dtype=torch.float64)
        with torch.no_grad():
            bias.table.normal_(0, std)
        g = torch.Generator().manual_seed(seed)
        q, k, v, dout = (torch.randn(1, 4, 128, 32, generator=g, dtype=torch.float64) for _ in range(4))
        exact = _t5_table_grad(bias, q, k, v, dout, masks.causal(), "plain", torch.float64)
        naive += float((_t5_table_grad(bias, q, k, v, dout, masks.causal(), "plain", torch.float32) - exact).abs().max())
        errs += float((_t5_table_grad(bias, q, k, v, dout, masks.causal(), backend, torch.float32) - exact).abs().max())
    assert errs <= 3 * naive, f"table gradient error {errs:.3g}, plain float32 softmax {naive:.3g}"
