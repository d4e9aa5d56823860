"""RotaryEmbedding against the paper's complex-number form, its relative-position property,
gradcheck, MHA-with-RoPE against a hand-written float64 reference, and bad inputs."""

from __future__ import annotations

import math

import pytest
import torch

from attnkit import MultiHeadAttention
from attnkit.modules.rotary import RotaryEmbedding


def complex_rope(x: torch.Tensor, pos: torch.Tensor, base: float = 10000.0, interleaved: bool = False) -> torch.Tensor:
    """Independent reference: plane i as a complex number times e^{j p θ_i} (float64 / complex128)."""
    E = x.shape[-1]
    x = x.double()
    if interleaved:
        z = torch.complex(x[..., 0::2], x[..., 1::2])
    else:
        z = torch.complex(x[..., : E // 2], x[..., E // 2:])
    theta = torch.tensor([base ** (-2.0 * i / E) for i in range(E // 2)], dtype=torch.float64)
    pos = pos.double()
    ang = (pos[..., None] * theta) if pos.dim() == 1 else (pos[:, None, :, None] * theta)
    r = z * torch.polar(torch.ones_like(ang), ang)
    if interleaved:
        return torch.stack((r.real, r.imag), -1).flatten(-2)
    return torch.cat((r.real, r.imag), -1)


@pytest.mark.parametrize("interleaved", [False, True])
def test_matches_complex_reference(interleaved):
    rope = RotaryEmbedding(16, max_positions=5000, interleaved=interleaved)
    x = torch.randn(3, 2, 5, 16, dtype=torch.float64)
    pos = torch.tensor([[0, 1, 2, 3, 4], [7, 9, 11, 13, 15], [4990, 4991, 4995, 4998, 4999]])
    torch.testing.assert_close(rope(x, pos), complex_rope(x, pos, interleaved=interleaved), atol=1e-12, rtol=1e-12)
    # float32: the error is that of float32 rounding of the inputs, not of the table (computed in float64)
    x32 = x.float()
    err32 = (rope(x32, pos).double() - complex_rope(x32, pos, interleaved=interleaved)).abs().max()
    assert err32 < 8 * torch.finfo(torch.float32).eps * x.abs().max()


def test_scores_depend_only_on_relative_position():
    rope = RotaryEmbedding(8, max_positions=200)
    q, k = torch.randn(1, 1, 1, 8, dtype=torch.float64), torch.randn(1, 1, 1, 8, dtype=torch.float64)
    base = (rope(q, torch.tensor([10])) * rope(k, torch.tensor([3]))).sum()
    for shift in (1, 50, 150):
        s = (rope(q, torch.tensor([10 + shift])) * rope(k, torch.tensor([3 + shift]))).sum()
        torch.testing.assert_close(s, base, atol=1e-12, rtol=1e-12)
    other = (rope(q, torch.tensor([11])) * rope(k, torch.tensor([3]))).sum()
    assert (other - base).abs() > 1e-6  # it does depend on the distance


def test_norm_preserved_and_position_zero_is_identity():
    rope = RotaryEmbedding(12, max_positions=64)
    x = torch.randn(2, 3, 4, 12, dtype=torch.float64)
    torch.testing.assert_close(rope(x, torch.zeros(4, dtype=torch.long)), x)
    torch.testing.assert_close(rope(x, torch.arange(4) * 9).norm(dim=-1), x.norm(dim=-1))


def test_gradcheck_float64():
    rope = RotaryEmbedding(6, max_positions=32, interleaved=True)
    x = torch.randn(2, 1, 3, 6, dtype=torch.float64, requires_grad=True)
    pos = torch.tensor([[1, 5, 30], [0, 2, 4]])
    assert torch.autograd.gradcheck(lambda t: rope(t, pos), (x,))


def test_mha_with_rope_matches_handwritten_reference():
    """MultiHeadAttention(rotary=...) causal self-attention vs explicit float64 math."""
    D, H = 16, 2
    mha = MultiHeadAttention(D, H, rotary=RotaryEmbedding(D // H, max_positions=32), dtype=torch.float64)
    x = torch.randn(2, 5, D, dtype=torch.float64)
    out, _ = mha(x, causal=True)
    B, L, _ = x.shape
    proj = lambda lin: (x @ lin.weight.T + lin.bias).view(B, L, H, D // H).transpose(1, 2)  # noqa: E731
    pos = torch.arange(L)
    q, k, v = complex_rope(proj(mha.q_proj), pos), complex_rope(proj(mha.k_proj), pos), proj(mha.v_proj)
    s = q @ k.transpose(-1, -2) / math.sqrt(D // H)
    s = s.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), float("-inf"))
    ref = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, L, D) @ mha.out_proj.weight.T + mha.out_proj.bias
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-12)


def test_positions_beyond_table_is_a_clear_error():
    rope = RotaryEmbedding(8, max_positions=16)
    x = torch.randn(1, 1, 2, 8)
    with pytest.raises(ValueError, match=r"position 16 is beyond the rotary table \(max_positions=16.*max_positions > 16"):
        rope(x, torch.tensor([15, 16]))
    with pytest.raises(ValueError, match="must be >= 0"):
        rope(x, torch.tensor([-1, 0]))
    with pytest.raises(TypeError, match="integer tensor"):
        rope(x, torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"shape \(L,\)=\(2,\)"):
        rope(x, torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="head_dim must be even"):
        RotaryEmbedding(7)


def test_decoding_past_the_rotary_table_raises():
    from attnkit.cache import DynamicCache

    mha = MultiHeadAttention(8, 2, rotary=RotaryEmbedding(4, max_positions=4))
    cache = DynamicCache()
    with torch.no_grad():
        mha(torch.randn(1, 4, 8), cache=cache, causal=True)
        with pytest.raises(ValueError, match="position 4 is beyond the rotary table"):
            mha(torch.randn(1, 1, 8), cache=cache, causal=True)
    assert cache.seq_lengths().tolist() == [4]  # the failed step wrote nothing


def test_rotary_head_dim_mismatch():
    with pytest.raises(ValueError, match="head_dim=4 but this module has head_dim=8"):
        MultiHeadAttention(16, 2, rotary=RotaryEmbedding(4))


def test_positions_without_a_cache():
    """positions= on a plain forward rotates q/k and evaluates biases there; relative encodings
    are unchanged by a common shift, and per-row positions (B, L) are honoured."""
    from attnkit.core.biases import ALiBi

    mha = MultiHeadAttention(16, 2, rotary=RotaryEmbedding(8, max_positions=64), dtype=torch.float64)
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    base, _ = mha(x, causal=True, bias=ALiBi(2))
    shifted, _ = mha(x, causal=True, bias=ALiBi(2), positions=torch.arange(5) + 20)
    torch.testing.assert_close(shifted, base, atol=1e-12, rtol=0)
    per_row, _ = mha(x, causal=True, bias=ALiBi(2), positions=torch.stack([torch.arange(5), torch.arange(5) + 7]))
    torch.testing.assert_close(per_row, base, atol=1e-12, rtol=0)
    spread, _ = mha(x, causal=True, bias=ALiBi(2), positions=torch.arange(5) * 3)  # gaps change distances
    assert (spread - base).abs().max() > 1e-6
    with pytest.raises(ValueError, match="cross-attention"):
        mha(x, torch.randn(2, 3, 16, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"positions must be an integer tensor \(L,\)=\(5,\)"):
        mha(x, positions=torch.arange(4))
