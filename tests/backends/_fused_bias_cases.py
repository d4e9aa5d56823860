"""Shared by the fused bias routes' tests (relative and custom): inputs at realistic logit scales and
each route's error against the float64 oracle beside the float32 reference's own."""

from __future__ import annotations

import torch

import attnkit


def inputs(B, H, Hkv, L, S, E, dtype=torch.float32, seed=0):
    """q (B, H, L, E), k and v (B, Hkv, S, E), scaled by 1.5."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, h, n, E, generator=g, dtype=dtype) * 1.5 for h, n in ((H, L), (Hkv, S), (Hkv, S))]


def errors(q, k, v, bias, mask, lse_atol: float | None = None):
    """(route error, reference float32 error, route result): both against the float64 oracle. The
    fully masked rows (lse -inf) must agree; with ``lse_atol``, the finite lse values too."""
    res = attnkit.attention(q, k, v, bias=bias, mask=mask, backend="blockwise")
    ref32 = attnkit.attention(q, k, v, bias=bias, mask=mask, backend="reference")
    oracle = attnkit.attention(*(t.double() for t in (q, k, v)), bias=bias, mask=mask, backend="reference")
    err = (res.out.double() - oracle.out).abs().max().item()
    err32 = (ref32.out.double() - oracle.out).abs().max().item()
    assert torch.equal(torch.isneginf(res.lse), torch.isneginf(oracle.lse)), "fully masked rows differ"
    if lse_atol is not None:
        fin = torch.isfinite(oracle.lse)
        assert torch.allclose(res.lse.double()[fin], oracle.lse[fin], atol=lse_atol)
    return err, err32, res


def mask_of(name: str, B: int, L: int, S: int):
    """The masks the bias routes' tests run under, by name (documents: three per sequence, any L, S)."""
    from attnkit import masks as M

    if name == "none":
        return None
    if name == "causal":
        return M.causal()
    if name == "causal_top_left":
        return M.causal(align="top_left")
    if name == "window":
        return M.sliding_window(11, 4)
    if name == "padding":
        return M.padding_mask([S - 5 * i for i in range(B)], S)
    if name == "document":
        return M.document(torch.arange(S) * 3 // S, torch.arange(L) * 3 // L)
    raise ValueError(f"mask name: expected none, causal, causal_top_left, window, padding or document, got {name!r}")
