"""DecoderAttention (window, sinks, softcap, q/k norm, output gate) and DifferentialAttention against
the papers' formulas written out with an explicit softmax in float64; cached decoding equals
prefill; bad arguments raise with the fix."""

from __future__ import annotations

import math

import pytest
import torch

from attnkit.modules.decoder_attention import DecoderAttention
from attnkit.modules.differential_attention import DifferentialAttention, lambda_init_for
from attnkit.modules.gated_attention import OutputGate
from attnkit.modules.rms_norm import RMSNorm

pytestmark = pytest.mark.usefixtures("one_thread")
D, H, HKV, E, L = 32, 4, 2, 8, 7


def _rope(x, pos, base=10000.0):
    """Rotate-half RoPE written out: plane i = (x_i, x_{i+E/2}) at angle pos · base^(-2i/E)."""
    half = x.shape[-1] // 2
    ang = pos.double()[:, None] * base ** (-torch.arange(half, dtype=torch.float64) * 2 / x.shape[-1])
    c, s = ang.cos(), ang.sin()
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), -1)


def _heads(m, x):
    """Projected, normed, rotated q (B, H, L, E), k and v (B, H, L, E) with kv heads repeated, float64."""
    B = x.shape[0]
    q = m.q_proj(x).view(B, L, m.num_heads, E)
    k = m.k_proj(x).view(B, L, m.kv_heads, E)
    if m.q_norm is not None:
        q = q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + m.q_norm.eps) * m.q_norm.weight
        k = k * torch.rsqrt(k.pow(2).mean(-1, keepdim=True) + m.k_norm.eps) * m.k_norm.weight
    pos = torch.arange(L)
    rep = m.num_heads // m.kv_heads
    q, k = _rope(q.transpose(1, 2), pos), _rope(k.transpose(1, 2), pos).repeat_interleave(rep, 1)
    v = m.v_proj(x).view(B, L, m.kv_heads, E).transpose(1, 2).repeat_interleave(rep, 1)
    return q, k, v


def _allowed(window):
    q, k = torch.arange(L)[:, None], torch.arange(L)[None]
    return (k <= q) & ((q - k < window) if window else True)


def test_decoder_attention_matches_the_formula_with_every_feature():
    torch.manual_seed(0)
    gate = OutputGate(D, H, E, kind="headwise", dtype=torch.float64)
    m = DecoderAttention(D, H, kv_heads=HKV, head_dim=E, window=3, sinks=True, softcap=1.5, q_norm=RMSNorm(E, dtype=torch.float64),
                         k_norm=RMSNorm(E, dtype=torch.float64), gate=gate, dtype=torch.float64)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    x = torch.randn(2, L, D, dtype=torch.float64)
    q, k, v = _heads(m, x)
    s = q @ k.transpose(-1, -2) * m.scale
    s = 1.5 * torch.tanh(s / 1.5)
    s = s.masked_fill(~_allowed(3), float("-inf"))
    sink = m.sinks.view(1, H, 1, 1).expand(2, H, L, 1)
    p = torch.softmax(torch.cat((s, sink), -1), -1)[..., :L]  # the sink takes weight, brings no value
    o = (p @ v).transpose(1, 2) * torch.sigmoid(gate.proj(x)).view(2, L, H, 1)
    want = m.o_proj(o.reshape(2, L, -1))
    got, w = m(x, need_weights=True)
    assert (got - want).abs().max().item() < 1e-12
    assert (w - p).abs().max().item() < 1e-12


@pytest.mark.parametrize("kind", ["elementwise", "headwise"])
def test_output_gate_is_a_sigmoid_of_the_token_input(kind):
    g = OutputGate(D, H, E, kind=kind)
    x, out = torch.randn(2, L, D), torch.randn(2, L, H, E)
    logits = x @ g.proj.weight.T
    want = out * torch.sigmoid(logits).view(2, L, H, -1)
    assert torch.allclose(g(out, x), want, atol=1e-6)
    assert g.proj.out_features == (H * E if kind == "elementwise" else H)
    with torch.no_grad():
        g.proj.weight.fill_(0.0)
        g.proj.weight[:, 0] = -1e4 if kind == "headwise" else 0  # headwise: a hugely negative logit switches heads off
    x[..., 0] = 1.0
    if kind == "headwise":
        assert g(out, x).abs().max().item() == 0.0


def test_differential_attention_matches_the_paper():
    torch.manual_seed(0)
    m = DifferentialAttention(D, H, kv_heads=HKV, head_dim=E, depth=2, dtype=torch.float64)
    x = torch.randn(2, L, D, dtype=torch.float64)
    q, k, v = _heads(m, x)  # kv heads repeated to H: query head h reads kv head h // 2
    mask = ~_allowed(None)
    a = torch.softmax((q @ k.transpose(-1, -2) * E ** -0.5).masked_fill(mask, float("-inf")), -1)  # (B, H, L, L)
    lam = math.exp(float(m.lambda_q1.detach() @ m.lambda_k1.detach())) - math.exp(float(m.lambda_q2.detach() @ m.lambda_k2.detach())) + lambda_init_for(2)
    # head pair i = (i, i + H/2); its values: kv heads (g, g + Hkv/2) side by side, g = i // (H / Hkv)
    vv = m.v_proj(x).view(2, L, HKV, E).transpose(1, 2)
    outs = []
    for i in range(H // 2):
        g = i // (H // HKV)
        vp = torch.cat((vv[:, g], vv[:, g + HKV // 2]), -1)  # (B, L, 2E)
        d = (a[:, i] - lam * a[:, i + H // 2]) @ vp
        d = d * torch.rsqrt(d.pow(2).mean(-1, keepdim=True) + m.pair_norm.eps)
        outs.append((1 - lambda_init_for(2)) * d)
    want = m.o_proj(torch.cat(outs, -1))
    got, w = m(x, need_weights=True)
    assert (got - want).abs().max().item() < 1e-12
    assert (w[:, 0] - (a[:, 0] - lam * a[:, H // 2])).abs().max().item() < 1e-12


def test_lambda_init_follows_the_paper():
    assert lambda_init_for(0) == pytest.approx(0.2)
    assert lambda_init_for(10) == pytest.approx(0.8 - 0.6 * math.exp(-3))
    with pytest.raises(ValueError, match="depth"):
        lambda_init_for(-1)


@pytest.mark.parametrize("make", [
    lambda: DecoderAttention(D, H, kv_heads=HKV, window=3, sinks=True, gate=OutputGate(D, H, D // H)),
    lambda: DifferentialAttention(D, H, kv_heads=HKV, depth=1),
])
def test_cached_decoding_equals_prefill(make):
    torch.manual_seed(0)
    m = make()
    x = torch.randn(2, L, D)
    with torch.no_grad():
        full, _ = m(x)
        cache = m.new_cache()
        steps = [m(x[:, :3], cache=cache)[0]] + [m(x[:, t:t + 1], cache=cache)[0] for t in range(3, L)]
    assert (torch.cat(steps, 1) - full).abs().max().item() <= 1e-5


def test_bad_arguments_raise_with_the_fix():
    with pytest.raises(ValueError, match="multiple of kv_heads"):
        DecoderAttention(D, 4, kv_heads=3)
    with pytest.raises(ValueError, match="must be even"):
        DifferentialAttention(D, 4, kv_heads=1)
    with pytest.raises(ValueError, match="sinks"):
        DifferentialAttention(D, 4, sinks=True)
    with pytest.raises(ValueError, match="kind must be one of"):
        OutputGate(D, H, E, kind="channel")
    with pytest.raises(ValueError, match="offset must be 0"):
        RMSNorm(8, offset=2)
    with pytest.raises(ValueError, match=r"x must be \(B, L, D=32\)"):
        DecoderAttention(D, H)(torch.randn(2, 5, 16))
    with pytest.raises(TypeError, match="cache must be"):
        DecoderAttention(D, H)(torch.randn(2, 5, D), cache=object())
