"""Shared pieces of the fused routes' gradient tests: seeded inputs, a plain-autograd oracle and
the max-abs error, so each route's test states only its cases and its tolerance rule.

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E head dim.
"""

from __future__ import annotations

import torch


def grad_inputs(shape, magnitude=2.0, seed=0, dtype=torch.float32):
    """q (B, H, L, E) and k (B, Hkv, S, E) scaled by ``magnitude``, v (B, Hkv, S, E), dout
    (B, H, L, E) and dlse (B, H, L), from ``shape`` = (B, H, Hkv, L, S, E), in ``dtype``."""
    B, H, Hkv, L, S, E = shape
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, L, E, generator=g) * magnitude
    k = torch.randn(B, Hkv, S, E, generator=g) * magnitude
    v = torch.randn(B, Hkv, S, E, generator=g)
    dout, dlse = torch.randn(B, H, L, E, generator=g), torch.randn(B, H, L, generator=g)
    return [t.to(dtype) for t in (q, k, v, dout, dlse)]


def oracle(q, k, v, mask):
    """(out, lse) of plain softmax attention in q's dtype (GQA by repeating kv heads); a row with no
    allowed key gives out 0 and lse -inf."""
    g = q.shape[1] // k.shape[1]
    kk, vv = (t.repeat_interleave(g, 1) for t in (k, v))
    allowed = mask.materialize(q.shape[2], k.shape[2], batch=q.shape[0])
    s = (q @ kk.transpose(-1, -2) * q.shape[-1] ** -0.5).masked_fill(~allowed, float("-inf"))
    return torch.softmax(s, -1).nan_to_num(0.0) @ vv, torch.logsumexp(s, -1)


def grads_of(fn, q, k, v, dout, dlse, dtype):
    """(dq, dk, dv) of ``fn(q, k, v) -> (out, lse)`` run in ``dtype``, for the cotangents dout and
    dlse; an lse of -inf (no allowed key) takes no gradient."""
    leaves = [t.detach().to(dtype).requires_grad_(True) for t in (q, k, v)]
    out, lse = fn(*leaves)
    lse = lse.masked_fill(torch.isneginf(lse), 0.0)
    return torch.autograd.grad((out, lse), leaves, (dout.to(dtype), dlse.to(dtype)))


def max_err(a, b) -> float:
    return float((a.double() - b.double()).abs().max())
