"""SqueezeExcite: the paper's parameter formula, parity with an independent NumPy SE, bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

from attnkit.modules.squeeze_excite import SqueezeExcite


def numpy_se(x: np.ndarray, w1, b1, w2, b2) -> np.ndarray:
    z = x.mean(axis=(2, 3))  # (B, C)
    s = 1.0 / (1.0 + np.exp(-(np.maximum(z @ w1.T + b1, 0.0) @ w2.T + b2)))
    return x * s[:, :, None, None]


@given(st.integers(1, 64), st.integers(1, 16))
def test_parameter_count_is_the_papers_formula(c_over_r, r):
    C = c_over_r * r
    se = SqueezeExcite(C, r, device="meta")
    assert sum(p.numel() for p in se.parameters()) == 2 * C * C // r + C + C // r


def test_matches_numpy_reference():
    se = SqueezeExcite(32, 4).double()
    x = torch.randn(3, 32, 5, 7, dtype=torch.float64)
    p = [t.detach().numpy() for t in (se.fc1.weight, se.fc1.bias, se.fc2.weight, se.fc2.bias)]
    np.testing.assert_allclose(se(x).detach().numpy(), numpy_se(x.numpy(), *p), rtol=1e-12, atol=1e-12)


def test_gates_each_channel_by_one_factor_in_0_1():
    se = SqueezeExcite(16, 4)
    x = torch.rand(2, 16, 6, 6) + 0.1
    ratio = se(x) / x
    assert torch.allclose(ratio, ratio[:, :, :1, :1].expand_as(ratio), atol=1e-6)
    assert bool(((ratio > 0) & (ratio < 1)).all())


def test_gradcheck_float64():
    se = SqueezeExcite(8, 2).double()
    x = torch.randn(2, 8, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(se, (x,))


def test_every_constructor_argument_has_an_effect():
    base = SqueezeExcite(32, 16)
    assert base.fc1.out_features == 2 and SqueezeExcite(32, 4).fc1.out_features == 8  # reduction
    assert SqueezeExcite(64, 16).fc2.out_features == 64  # channels
    assert SqueezeExcite(32, 16, dtype=torch.float64).fc1.weight.dtype == torch.float64
    assert SqueezeExcite(32, 16, device="meta").fc1.weight.device.type == "meta"


@pytest.mark.parametrize(
    "make, x, match",
    [
        (lambda: SqueezeExcite(16), torch.randn(2, 8, 4, 4), "channels=16 but x has C=8"),
        (lambda: SqueezeExcite(16), torch.randn(16, 4, 4), "add a batch axis"),
        (lambda: SqueezeExcite(16, reduction=32), None, "reduction=32 is larger than channels=16"),
        (lambda: SqueezeExcite(0), None, "channels must be a positive int"),
        (lambda: SqueezeExcite(16), torch.ones(1, 16, 2, 2, dtype=torch.long), "floating-point"),
    ],
)
def test_bad_inputs_get_one_clear_error(make, x, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()(x)
