"""Blockwise float32 accuracy at large logits, against the float64 reference, by flash-attention's
rule: the error of out and dv at most 2× the float32 reference's own error plus 16 ulps of the
quantity's magnitude, with no allowance that grows with the logits.

At logits of a few hundred (inputs of std 10, or scale 2) the tile loop used to recompute its
weights as exp2(s·log2 e - lse2): the scores rounded relative to |s| after the base-2 scaling, and
an lse rounded at |max|, so every weight of a row was off by ~|logit|·6e-8 — up to 30× the float32
reference's error in dv. These cases pinned that; the fuzz (tests/fuzz) covers the rest.

Shape legend: q (B, H, L, E), k/v (B, Hkv, S, E).
"""

from __future__ import annotations

import pytest
import torch

import attnkit
from _backend_cases import tiles
from attnkit import biases, masks

CASES = {
    "dense": dict(mask=None, bias=None, scale=None),
    "causal_alibi": dict(mask=masks.causal(), bias="alibi", scale=None),
    "padding_scale2": dict(mask=masks.padding_mask(torch.tensor([29, 17]), max_len=33), bias=None, scale=2.0),
}


def _run(backend, q, k, v, dout, dtype, kw):
    q, k, v = (t.detach().to(dtype).requires_grad_() for t in (q, k, v))
    out = attnkit.attention(q, k, v, backend=backend, **kw).out
    out.backward(dout.to(dtype))
    return {"out": out.detach().double(), "dv": v.grad.double()}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_out_and_dv_within_2x_the_float32_reference_at_large_logits(name, seed):
    g = torch.Generator().manual_seed(seed)
    B, H, Hkv, L, S, E = 2, 4, 2, 33, 33, 16
    q = torch.randn(B, H, L, E, generator=g, dtype=torch.float64) * 10
    k = torch.randn(B, Hkv, S, E, generator=g, dtype=torch.float64) * 10
    v = torch.randn(B, Hkv, S, E, generator=g, dtype=torch.float64) * 3
    dout = torch.randn(B, H, L, E, generator=g, dtype=torch.float64)
    spec = CASES[name]
    kw = {"mask": spec["mask"], "bias": biases.ALiBi(H) if spec["bias"] == "alibi" else None, "scale": spec["scale"]}
    truth = _run("reference", q, k, v, dout, torch.float64, kw)
    base = _run("reference", q, k, v, dout, torch.float32, kw)
    with tiles(8, 8):  # forced tiles: the tile loop runs, not a fused kernel
        got = _run("blockwise", q, k, v, dout, torch.float32, kw)
    eps = torch.finfo(torch.float32).eps
    for n in ("out", "dv"):
        err = float((got[n] - truth[n]).abs().max())
        tol = 2 * float((base[n] - truth[n]).abs().max()) + 16 * eps * max(1.0, float(truth[n].abs().max()))
        assert err <= tol, f"{n}: blockwise error {err:.3g} > 2x the float32 reference's + 16 ulps = {tol:.3g}"

