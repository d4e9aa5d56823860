"""A NaN or inf inside a bias computed from positions (ALiBi's slopes, a T5 or Shaw table) gives the
reference's result on ``sdpa`` and ``auto``: :mod:`attnkit.backends.nonfinite` checks those tensors
(O(parameters)) and sends the call to the exact path, as it does for q, k, v and dense biases.
Without the check the fused kernel decided on its own what a NaN score means."""

from __future__ import annotations

import pytest
import torch

import attnkit
from attnkit.backends.nonfinite import computed_bias_unsafe


def _poisoned(kind: str, value: float):
    torch.manual_seed(0)
    if kind == "t5":
        bias = attnkit.biases.T5RelativeBias(2, num_buckets=8, max_distance=8)
        with torch.no_grad():
            next(bias.parameters())[3, 1] = value  # one bucket of head 1
    elif kind == "shaw":
        bias = attnkit.biases.RelativePositionBias(2, max_distance=4)
        with torch.no_grad():
            next(bias.parameters())[4, 0] = value  # distance 0 of head 0: the diagonal
    else:
        bias = attnkit.biases.ALiBi(2)
        bias.slopes[1] = value
    return bias


def _run(backend, bias, q, k, v, d_out):
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    out = attnkit.attention(q, k, v, backend=backend, bias=bias).out
    out.backward(d_out)
    return [out.detach(), q.grad, k.grad, v.grad]


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
@pytest.mark.parametrize("kind", ["t5", "shaw", "alibi"])
@pytest.mark.parametrize("backend", ["sdpa", "auto"])
def test_nonfinite_computed_bias_gives_the_references_result(kind, value, backend):
    g = torch.Generator().manual_seed(1)
    q, k, v, d_out = (torch.randn(1, 2, 10, 4, generator=g) for _ in range(4))
    bias = _poisoned(kind, value)
    assert computed_bias_unsafe(bias)
    want = _run("reference", bias, q, k, v, d_out)
    got = _run(backend, bias, q, k, v, d_out)
    assert not all(bool(torch.isfinite(t).all()) for t in want), "the poison should reach the result"
    for name, a, b in zip(("out", "dq", "dk", "dv"), got, want):
        torch.testing.assert_close(a, b, equal_nan=True, rtol=1e-5, atol=1e-5, msg=name)


def test_finite_computed_biases_keep_the_fast_path():
    for kind in ("t5", "shaw", "alibi"):
        assert not computed_bias_unsafe(_poisoned(kind, 0.5))
    assert not computed_bias_unsafe(None)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_the_finite_check_sees_one_nan_or_inf_in_every_dtype_and_passes_ordinary_values(dtype):
    from attnkit.backends.nonfinite import all_finite
    big = 6e4 if dtype == torch.float16 else 1e30  # ordinary large values: a sum in float16 would overflow
    x = torch.full((8, 512, 64), big, dtype=dtype)
    assert all_finite(x)
    for bad in (float("nan"), float("inf"), float("-inf")):
        y = x.clone()
        y[3, 100, 7] = bad
        assert not all_finite(y), (dtype, bad)
