"""The reference backend: the semantic spec of :func:`attnkit.attention`.

It materializes everything — scores (B, H, L, S), the dense mask and bias — and computes in float32
for half-precision inputs (float64 stays float64), so every other backend is tested against it.
Slow and memory-hungry by design; it is the only exact backend besides the blockwise one that can
return weights.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..core import cost
from ..core.call import AttentionCall
from ..core.output import BackendResult, materialized
from ..core.softmax import safe_softmax


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Half-precision inputs are computed in float32 (softmax in fp16 overflows)."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def run(call: AttentionCall) -> BackendResult:
    dt = call.q.dtype
    work = compute_dtype(dt)
    # cast before repeating heads: the backward of repeat_interleave sums each group's dk, dv, and
    # that sum must run in float32 for half inputs, not in the input dtype
    q, k, v = call.q.to(work), call.k.to(work), call.v.to(work)
    if call.groups > 1:
        k, v = k.repeat_interleave(call.groups, dim=1), v.repeat_interleave(call.groups, dim=1)
    B, H, L, _ = q.shape
    S = k.shape[2]
    allowed = None
    mats = []
    if call.mask is not None:
        allowed = call.mask.materialize(L, S, batch=B, heads=H, device=q.device)
        mats.append(materialized("mask", allowed))
        # keys no query of this head sees may hold anything (padding, unused cache slots): zero them,
        # since a weight of 0 times a NaN value is still NaN in weights @ v
        dead = (~allowed.any(-2)).unsqueeze(-1)  # (B|1, H|1, S, 1)
        k, v = k.masked_fill(dead, 0.0), v.masked_fill(dead, 0.0)
    scores = call.score(q, k) * call.scale  # (B, H, L, S)
    mats.insert(0, materialized("scores", scores))
    if call.bias is not None:
        scores = call.bias.apply(scores, (0, L), (0, S), L, S)
    weights, lse = safe_softmax(scores, allowed)  # (B, H, L, S), (B, H, L)
    fully_masked = torch.isneginf(lse).sum()  # a tensor: no host read (meta tensors, compiled graphs)
    dropped = F.dropout(weights, call.dropout_p) if call.dropout_p > 0 else weights
    out = dropped @ v  # (B, H, L, Ev)
    return BackendResult(
        out.to(dt),
        weights.to(dt) if call.return_weights else None,
        lse,
        fully_masked,
        mats,
    )


def supports(call: AttentionCall) -> str | None:
    return None


_SOFTMAX_OPS = 6.0  # max, subtract, exp, sum, divide, mask fill: passes not in the flops rate


def estimate(call: AttentionCall) -> cost.Estimate:
    """Time and extra bytes of :func:`run`: every (B, H, L, S) tensor is materialized in fp32."""
    B, H, Hkv, L, S, E, Ev = cost.dims(call)
    pairs = B * H * L * S
    elem = cost.RATES["elem_per_s"]
    time_s = cost.RATES["call_overhead_s"]["reference"] + 2 * pairs * (E + Ev) / cost.rate("reference_flops", call.q.dtype)
    time_s += pairs * (_SOFTMAX_OPS + cost.bias_ops(call.bias) + cost.score_ops(call)) / elem
    nbytes = 4.0 * pairs * 4  # scores, exp, weights, mask fill: each (B, H, L, S) fp32
    if call.mask is not None:
        n = cost.extent(call.mask, B, H, L, S)
        time_s += n * cost.MASK_OPS / elem
        nbytes += n
    if Hkv != H:
        nbytes += 2 * B * H * S * (E + Ev) * 4  # repeated k and v
    nbytes += B * H * L * Ev * call.q.element_size()
    return {"time_s": time_s, "bytes": float(nbytes)}
