"""Gradients reach tensors a custom bias or score function reads from outside (closure, global,
bound module): blockwise recomputes tiles in its own backward, so it must find them itself."""

from __future__ import annotations

import pytest
import torch

import attnkit
from attnkit import biases

GLOBAL_W = torch.randn(2, dtype=torch.float64, requires_grad=True)


def _global_bias(b, h, q_idx, kv_idx):
    return GLOBAL_W[h] * (q_idx - kv_idx).abs().to(torch.float64) * 0.1


class _Slopes(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(2, dtype=torch.float64))

    def bias(self, b, h, q_idx, kv_idx):
        return -self.w[h] * (q_idx - kv_idx).abs().to(torch.float64) * 0.05


def _closure_cases():
    w = torch.randn(2, dtype=torch.float64, requires_grad=True)

    def closure_bias(b, h, q_idx, kv_idx):
        return w[h] * torch.cos((q_idx - kv_idx).to(torch.float64))

    def closure_softcap(s, b, h, q_idx, kv_idx):
        return 5.0 * torch.tanh(s / 5.0) + w[h]

    slopes = _Slopes()
    return [
        ("closure-bias", biases.CustomBias(closure_bias), [w]),
        ("closure-score-mod", biases.ScoreMod(closure_softcap), [w]),
        ("global-bias", biases.CustomBias(_global_bias), [GLOBAL_W]),
        ("bound-module", biases.CustomBias(slopes.bias), [slopes.w]),
    ]


@pytest.mark.parametrize("case", range(4), ids=[c[0] for c in _closure_cases()])
def test_captured_tensors_get_the_reference_gradient(case):
    _, bias, captured = _closure_cases()[case]
    g = torch.Generator().manual_seed(case)
    q, k, v = (torch.randn(1, 2, 70, 8, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    leaves = [q, k, v, *captured]
    grads = {}
    for be in ("reference", "blockwise"):
        for t in leaves:
            t.grad = None
        res = attnkit.attention(q, k, v, bias=bias, mask=attnkit.masks.causal(), backend=be)
        (res.out * torch.linspace(-1, 1, 8, dtype=torch.float64)).sum().backward()
        assert all(t.grad is not None for t in leaves), f"{be}: a captured tensor got no gradient"
        grads[be] = [t.grad.clone() for t in leaves]
    for ref, got in zip(grads["reference"], grads["blockwise"], strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-12)


def test_parameters_the_bias_never_touches_get_no_gradient():
    """A bias that is a bound method of a bigger module: only the parameters it reads get a
    gradient; the rest stay None (as with autograd), not zeros."""

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.slope = torch.nn.Parameter(torch.tensor([0.1, 0.2], dtype=torch.float64))
            self.unused = torch.nn.Linear(4, 4).double()

        def bias(self, b, h, q_idx, kv_idx):
            return -self.slope[h] * (q_idx - kv_idx).abs().to(torch.float64)

    blk = Block()
    q, k, v = (torch.randn(1, 2, 40, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    attnkit.attention(q, k, v, bias=biases.CustomBias(blk.bias), backend="blockwise").out.sum().backward()
    assert blk.slope.grad is not None and blk.slope.grad.abs().sum() > 0
    assert blk.unused.weight.grad is None and blk.unused.bias.grad is None
