"""The banded fused path's per-dtype geometry (block size, key padding) against float64 oracles.

The padding adds keys no query of a block may see, masked by the shared mask: exact for finite
inputs, never used when k or v holds a NaN or inf. bf16 runs taller blocks on CPUs with AMX (both
geometries are checked here, whatever this CPU has); its error must stay
within twice SDPA's own bf16 error (the same kernel on the dense mask) at realistic logit scales."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import attnkit
from attnkit import masks as M
from attnkit.backends.blockwise.kernel import band as fused_band, gate as fused_gate
from _routes import route_of
from attnkit.core.call import make_call

pytestmark = pytest.mark.skipif(not fused_gate.available(torch.float32), reason="fused CPU kernel not available")


def oracle(q, k, v, mask):
    """float64 attention with the mask materialized; rows with no allowed key give 0."""
    L, S = q.shape[2], k.shape[2]
    s = (q.double() @ k.double().transpose(-1, -2)) / q.shape[-1] ** 0.5
    s = s.masked_fill(~mask.materialize(L, S), float("-inf"))
    m = s.amax(-1, keepdim=True).nan_to_num(neginf=0.0)
    p = (s - m).exp()
    return (p / p.sum(-1, keepdim=True).clamp_min(1e-300)) @ v.double()


def inputs(L, S, dtype=torch.float32, logit_std=1.0, seed=0, H=4, E=64):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, H, L, E, generator=g) * logit_std ** 0.5  # q·k / sqrt(E) has std ~ logit_std
    k = torch.randn(1, H, S, E, generator=g) * logit_std ** 0.5
    v = torch.randn(1, H, S, E, generator=g)
    return [t.to(dtype) for t in (q, k, v)]


def band_route(q, k, v, mask):
    route = route_of(make_call(q, k, v, mask=mask))
    assert route is not None and route.kind == "band"
    return route.band


def test_geometry_per_dtype(monkeypatch):
    monkeypatch.setattr(fused_band, "PACKED_BF16", True)  # a CPU with AMX: taller bf16 blocks
    band = fused_band.band_of(M.sliding_window(255, 0), 4096, 4096)
    fp32, bf16 = fused_band.tuned(band, torch.float32), fused_band.tuned(band, torch.bfloat16)
    assert (fp32.b, fp32.w, fp32.pad) == (64, 320, 1)
    assert (bf16.b, bf16.w, bf16.pad) == (128, 384, 1)
    wide = fused_band.band_of(M.sliding_window(1023, 0), 4096, 4096)
    assert fused_band.tuned(wide, torch.bfloat16).b == 256 and fused_band.tuned(wide, torch.float32).b == 64
    monkeypatch.setattr(fused_band, "PACKED_BF16", False)  # without AMX: bf16 takes float32's geometry
    assert fused_band.tuned(band, torch.bfloat16) == fp32
    assert fused_band.tuned(wide, torch.bfloat16) == fused_band.tuned(wide, torch.float32)
    assert fused_band.tuned(band, torch.float32, finite_kv=False).pad == 0
    assert fused_band.tuned(band, torch.float64) == band
    small = fused_band.band_of(M.sliding_window(37, 0), 4096, 4096)  # padding 32 + 38 keys to 128: too dear
    assert fused_band.tuned(small, torch.bfloat16) == small


@pytest.mark.parametrize("align, L, S", [("bottom_right", 1024, 1024), ("top_left", 700, 1200), ("bottom_right", 900, 1000)])
def test_padded_windows_match_float64(align, L, S):
    mask = M.sliding_window(255, 0, align=align)
    q, k, v = inputs(L, S, seed=1)
    band = fused_band.tuned(band_route(q, k, v, mask), torch.float32)
    assert band.pad > 0 and band.interior[1] > band.interior[0]
    out = attnkit.attention(q, k, v, mask=mask, backend="blockwise").out
    ref = oracle(q, k, v, mask)
    own = (attnkit.attention(q, k, v, mask=mask, backend="reference").out.double() - ref).abs().max().item()
    assert (out.double() - ref).abs().max().item() <= 2 * own + 1e-6


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_nan_key_no_query_sees_never_enters_a_padded_window(dtype):
    # top-left window, L < S: keys from L on are never seen; key 512 is the padding key of the
    # last interior block (its window ends at key 511), so a NaN there must switch padding off
    L, S = 512, 1024
    mask = M.sliding_window(255, 0, align="top_left")
    q, k, v = inputs(L, S, dtype, seed=2)
    band = fused_band.tuned(band_route(q, k, v, mask), dtype)
    last = band.interior[1] - 1
    assert band.pad > 0 and band.start(last) + band.w - 1 == 512
    k[:, :, 512] = float("nan")
    v[:, :, 512] = float("nan")
    res = attnkit.attention(q, k, v, mask=mask, backend="blockwise")
    assert "fused kernel" in res.report.reason and torch.isfinite(res.out).all()
    k[:, :, 512] = 0.0
    v[:, :, 512] = 0.0
    clean = attnkit.attention(q, k, v, mask=mask, backend="blockwise").out  # padded: the same inputs, finite
    ref = oracle(q, k, v, mask)
    assert (res.out.double() - ref).abs().max().item() <= 2 * (clean.double() - ref).abs().max().item() + 1e-6


@pytest.mark.parametrize("packed", [True, False], ids=["amx_geometry", "fp32_geometry"])
@pytest.mark.parametrize("logit_std", [1.0, 5.0, 20.0])
def test_bf16_window_within_twice_sdpas_own_bf16_error(monkeypatch, logit_std, packed):
    monkeypatch.setattr(fused_band, "PACKED_BF16", packed)
    n = 1024
    mask = M.sliding_window(255, 0)
    q, k, v = inputs(n, n, torch.bfloat16, logit_std, seed=3)
    assert fused_band.tuned(band_route(q, k, v, mask), torch.bfloat16).b == (128 if packed else 64)
    res = attnkit.attention(q, k, v, mask=mask, backend="blockwise")
    assert "fused kernel, banded" in res.report.reason and res.out.dtype == torch.bfloat16
    ref = oracle(q, k, v, mask)
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.materialize(n, n))
    own = (sdpa.double() - ref).abs().max().item()
    assert (res.out.double() - ref).abs().max().item() <= 2 * own
    # the statistics are float32: the lse agrees with float64's to float32 rounding of the scores
    s = (q.double() @ k.double().transpose(-1, -2)) / 8.0
    lse_ref = torch.logsumexp(s.masked_fill(~mask.materialize(n, n), float("-inf")), -1)
    assert res.lse.dtype == torch.float32
    assert (res.lse.double() - lse_ref).abs().max().item() <= 1e-3 * (1 + lse_ref.abs().max().item())
