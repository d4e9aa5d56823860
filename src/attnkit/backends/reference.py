"""The reference backend: the semantic spec of :func:`attnkit.attention`.

It materializes everything — scores (B, H, L, S), the dense mask and bias — and computes in float32
for half-precision inputs (float64 stays float64), so every other backend is tested against it.
Slow and memory-hungry by design; it is the only exact backend besides the blockwise one that can
return weights.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from ..core import cost
from ..core.call import AttentionCall
from ..core.output import BackendResult, materialized
from ..core.softmax import safe_softmax


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Half-precision inputs are computed in float32 (softmax in fp16 overflows)."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def run(call: AttentionCall) -> BackendResult:
    q, k, v, allowed, mats = _prepare(call)
    out, weights, lse, scores = _rows(call, q, k, v, allowed, 0, call.L)
    mats.insert(0, materialized("scores", scores))
    return _result(call, out, weights, lse, mats)


def run_in_row_chunks(call: AttentionCall, max_pairs: int = 1 << 22) -> BackendResult:
    """:func:`run`'s exact semantics with query rows in chunks of at most ``max_pairs`` (B·H·rows·S)
    score elements, each chunk recomputed in the backward (``torch.utils.checkpoint``): the
    forward and the training memory stay O(chunk · S) instead of O(L · S). Rows are independent in
    softmax attention and dead keys are found over all rows first, so every value, NaN and gradient
    is the one :func:`run` gives. ``return_weights`` still returns the full (B, H, L, S) weights."""
    q, k, v, allowed, mats = _prepare(call)
    B, H, L, S = q.shape[0], q.shape[1], call.L, call.S
    rows = max(1, min(L, max_pairs // max(1, B * H * S)))
    if rows >= L:
        return run(call)
    train = torch.is_grad_enabled()
    outs, weights, lses = [], [], []
    for r0 in range(0, L, rows):
        r1 = min(L, r0 + rows)
        if train:
            o, w, lse, scores = checkpoint(_rows, call, q, k, v, allowed, r0, r1, use_reentrant=False)
        else:
            o, w, lse, scores = _rows(call, q, k, v, allowed, r0, r1)
        outs.append(o)
        lses.append(lse)
        if call.return_weights:
            weights.append(w)
    mats.insert(0, materialized("scores", scores))  # one chunk's: the largest held at once
    return _result(call, torch.cat(outs, 2), torch.cat(weights, 2) if weights else None, torch.cat(lses, 2), mats)


def _prepare(call: AttentionCall):
    """q, k, v in the compute dtype with kv heads repeated to H, the dense mask (or None) and the
    materialized-tensor records; keys no query of a head sees are zeroed."""
    work = compute_dtype(call.q.dtype)
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
        # a query row that may see no key outputs 0 whatever it holds: zero it, or a NaN there
        # would reach dk as 0 · NaN in the backward
        q = q.masked_fill((~allowed.any(-1)).unsqueeze(-1), 0.0)  # (B|1, H|1, L, 1)
    return q, k, v, allowed, mats


def _rows(call: AttentionCall, q, k, v, allowed, r0: int, r1: int):
    """Query rows r0:r1: (out (B, H, l, Ev) in the compute dtype, weights (B, H, l, S), lse (B, H, l),
    the scores (B, H, l, S) before the bias)."""
    L, S = call.L, call.S
    qr = q[:, :, r0:r1]
    scores = call.score(qr, k) * call.scale  # (B, H, l, S)
    biased = call.bias.apply(scores, (r0, r1), (0, S), L, S) if call.bias is not None else scores
    rows_allowed = allowed[:, :, r0:r1] if allowed is not None and allowed.shape[2] > 1 else allowed
    weights, lse = safe_softmax(biased, rows_allowed)  # (B, H, l, S), (B, H, l)
    dropped = F.dropout(weights, call.dropout_p) if call.dropout_p > 0 else weights
    # a row with nothing to see is 0 even when a value it may not see holds NaN (0 · NaN in weights @ v)
    out = (dropped @ v).masked_fill(torch.isneginf(lse).unsqueeze(-1), 0.0)  # (B, H, l, Ev)
    return out, weights, lse, scores


def _result(call: AttentionCall, out, weights, lse, mats) -> BackendResult:
    dt = call.q.dtype
    fully_masked = torch.isneginf(lse).sum()  # a tensor: no host read (meta tensors, compiled graphs)
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
