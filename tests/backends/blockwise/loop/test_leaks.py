"""Blockwise leak-proofing: what a masked key, value or bias slot holds — NaN,
±inf, 1e38 — never reaches the output or any gradient.

Each case runs twice: once with zeros in the dead slots (keys no query may see; bias entries no
query-key pair may use) and once with the hostile value there. Output and every gradient
(q, k, v, a learned bias) must be identical and finite, and the dead slots' own gradients 0.
Tiles are forced small so the dead keys fall in partly masked tiles as well as in skipped ones.
"""

from __future__ import annotations

import math

import pytest
import torch

import attnkit
from _backend_cases import tiles
from attnkit import masks as M

HOSTILE = [math.nan, math.inf, -math.inf, 1e38]
LENGTHS = torch.tensor([21, 9])  # batch 1 keeps keys 21.. dead, batch 0 keys 9..; S = 30


def _case(dtype, hostile, mask, bias_dead=None, seed=0, H=4, Hkv=2, score=None):
    g = torch.Generator().manual_seed(seed)
    B, L, S, E = 2, 27, 30, 8
    q = torch.randn(B, H, L, E, generator=g, dtype=dtype)
    k = torch.randn(B, Hkv, S, E, generator=g, dtype=dtype)
    v = torch.randn(B, Hkv, S, E, generator=g, dtype=dtype)
    dout = torch.randn(B, H, L, E, generator=g, dtype=dtype)
    bias = torch.randn(L, S, generator=g, dtype=dtype)
    dead = torch.arange(S)[None, :] >= LENGTHS.flip(0)[:, None]  # (B, S)
    k, v = k.masked_fill(dead[:, None, :, None], hostile), v.masked_fill(dead[:, None, :, None], hostile)
    if bias_dead is not None:
        bias = bias.masked_fill(bias_dead, hostile)
    leaves = [t.requires_grad_(True) for t in (q, k, v, bias)]
    with tiles(8, 8):
        out = attnkit.attention(q, k, v, mask=mask, bias=bias, score=score, backend="blockwise").out
    grads = torch.autograd.grad(out, leaves, dout)
    return out.detach(), grads, dead


def _check(dtype, hostile, mask, bias_dead=None, score=None):
    clean_out, clean_g, dead = _case(dtype, 0.0, mask, bias_dead, score=score)
    out, grads, _ = _case(dtype, hostile, mask, bias_dead, score=score)
    assert torch.isfinite(out).all() and torch.equal(out, clean_out)
    for name, g, c in zip(("dq", "dk", "dv", "dbias"), grads, clean_g):
        assert torch.isfinite(g).all(), f"{name} not finite with {hostile} in dead slots"
        torch.testing.assert_close(g, c, rtol=0, atol=0, msg=f"{name} changed with {hostile} in dead slots")
    for g in grads[1:3]:  # dk, dv of dead keys
        assert (g.transpose(1, 2)[dead] == 0).all()
    if bias_dead is not None:
        assert (grads[3][bias_dead] == 0).all()


@pytest.mark.parametrize("hostile", HOSTILE, ids=["nan", "inf", "-inf", "1e38"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_dead_keys_never_leak(hostile, dtype):
    _check(dtype, hostile, M.padding_mask(LENGTHS.flip(0), 30))


@pytest.mark.parametrize("hostile", HOSTILE, ids=["nan", "inf", "-inf", "1e38"])
def test_dead_keys_and_bias_never_leak_with_causal_padding(hostile):
    L, S = 27, 30
    mask = M.padding_mask(LENGTHS.flip(0), S) & M.causal()
    # bias entries no query may use in any batch: causal future (bottom-right aligned) of every query
    never = torch.arange(S)[None, :] > torch.arange(L)[:, None] + (S - L)
    _check(torch.float32, hostile, mask, bias_dead=never)


@pytest.mark.parametrize("hostile", HOSTILE, ids=["nan", "inf", "-inf", "1e38"])
def test_dead_keys_never_leak_through_the_cosine_transform(hostile):
    """cosine normalises k before the tiles see it; k/|k| of a NaN key has a NaN gradient unless the
    key is zeroed before the transform."""
    _check(torch.float32, hostile, M.padding_mask(LENGTHS.flip(0), 30), score="cosine")
