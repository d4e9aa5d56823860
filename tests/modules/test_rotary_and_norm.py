"""FrequencyRotary against attnkit's RotaryEmbedding (both layouts) and a partial-rotary reference;
RMSNorm against torch.nn.functional.rms_norm (both gain conventions)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnkit.modules.frequency_rotary import FrequencyRotary
from attnkit.modules.rms_norm import RMSNorm
from attnkit.modules.rotary import RotaryEmbedding


@pytest.mark.parametrize("interleaved", [False, True])
def test_base_table_equals_rotary_embedding(interleaved):
    E = 16
    inv = 1.0 / 10000.0 ** (torch.arange(0, E, 2, dtype=torch.float64) / E)
    x, pos = torch.randn(2, 3, 7, E, dtype=torch.float64), torch.randint(0, 500, (2, 7))
    want = RotaryEmbedding(E, max_positions=512, interleaved=interleaved)(x, pos)
    torch.testing.assert_close(FrequencyRotary(inv, interleaved=interleaved)(x, pos), want, rtol=1e-12, atol=1e-12)


def test_partial_rotary_rotates_the_first_dims_and_scales_them():
    E, R = 12, 4
    inv = torch.tensor([1.0, 0.01], dtype=torch.float64)
    x = torch.randn(1, 2, 5, E, dtype=torch.float64)
    out = FrequencyRotary(inv, scaling=1.5)(x)
    torch.testing.assert_close(out[..., R:], x[..., R:])  # the rest passes through
    want = 1.5 * RotaryEmbedding(R, max_positions=8, base=100.0 ** 2)(x[..., :R])  # θ_i = base^(-2i/R) = 1, 0.01
    torch.testing.assert_close(out[..., :R], want, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="E >= 4"):
        FrequencyRotary(inv)(torch.randn(1, 1, 2, 3))


@pytest.mark.parametrize("offset", [0, 1])
def test_rms_norm_matches_torch(offset):
    n = RMSNorm(8, eps=1e-5, offset=offset, dtype=torch.float64)
    with torch.no_grad():
        n.weight.normal_()
    x = torch.randn(3, 8, dtype=torch.float64)
    torch.testing.assert_close(n(x), F.rms_norm(x, (8,), weight=offset + n.weight, eps=1e-5))
    assert RMSNorm(8, affine=False).weight is None
