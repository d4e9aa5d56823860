"""PyTorch's fused ``scaled_dot_product_attention`` as a backend.

SDPA computes ``softmax(q kᵀ · scale + attn_mask) v`` with one optional mask: a bool tensor or an
additive float tensor. So this backend serves every score with a dot-product form (dot, scaled dot,
general via ``q W``, cosine via normalised q and k) and every mask and additive bias, by
translating them:

* causal masks use ``is_causal=True`` only where that is exact (top-left alignment, or L == S);
  bottom-right causal with L != S becomes a dense bool mask;
* other masks become one dense bool (B|1, H|1, L, S) tensor and biases a float one; masks are
  folded into the bias as -inf. The float mask is 4-D on purpose: a 3-D (H, L, S) mask silently
  drops CPU SDPA to its math path (../shared/PERF-NOTES.md).
* fully masked rows are unmasked for the kernel and zeroed afterwards, so no backend version can
  produce NaN for them, in the output or in the gradients.

Dense masks and biases are O(L·S) memory; the report records their bytes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..core import cost
from ..core.call import AttentionCall
from ..core.masks import CausalMask
from ..core.output import BackendResult, materialized
from ..core.tiles import kept_fraction

def supports(call: AttentionCall) -> str | None:
    if call.return_weights:
        return "SDPA does not return attention weights (return_weights=True); reference or blockwise can"
    if not call.score.dot_form:
        return f"score {call.score.name!r} has no dot-product form (SDPA computes only q·kᵀ)"
    if call.bias is not None and not call.bias.additive:
        return f"bias {type(call.bias).__name__} is a general score_mod, not additive; SDPA takes only an additive float mask"
    return None


def _uses_is_causal(call: AttentionCall) -> bool:
    m = call.mask
    return isinstance(m, CausalMask) and call.bias is None and (m.align == "top_left" or call.L == call.S)


def run(call: AttentionCall) -> BackendResult:
    q, k = call.score.as_dot(call.q, call.k)
    v = call.v
    B, H, L, _ = q.shape
    S = k.shape[2]
    mats = []
    attn_mask = None
    empty_rows = None
    fully_masked = 0
    if call.mask is not None and not _uses_is_causal(call) or call.bias is not None:
        allowed = None
        if call.mask is not None:
            allowed = call.mask.materialize(L, S, batch=B, heads=H, device=q.device)
            mats.append(materialized("mask", allowed))
        if call.bias is not None:
            attn_mask = call.bias.materialize(L, S, batch=B, heads=H, device=q.device, dtype=q.dtype)
            mats.append(materialized("bias", attn_mask))
            if allowed is not None:
                attn_mask = attn_mask.masked_fill(~allowed, float("-inf"))
            empty_rows = ~torch.isfinite(attn_mask).any(-1)  # (B|1, H|1, L)
            if bool(empty_rows.any()):
                attn_mask = attn_mask.masked_fill(empty_rows.unsqueeze(-1), 0.0)
        else:
            empty_rows = ~allowed.any(-1)
            attn_mask = allowed | empty_rows.unsqueeze(-1) if bool(empty_rows.any()) else allowed
        fully_masked = int(empty_rows.expand(B, H, L).sum())
    # enable_gqa (torch >= 2.5) reads kv head h // groups without copying k and v
    kwargs = {"enable_gqa": True} if call.groups > 1 else {}
    out = F.scaled_dot_product_attention(
        q, k, v,
        attn_mask=attn_mask,
        dropout_p=call.dropout_p,
        is_causal=_uses_is_causal(call),
        scale=call.scale,
        **kwargs,
    )
    if empty_rows is not None and fully_masked:
        out = out.masked_fill(empty_rows.unsqueeze(-1), 0.0)
    return BackendResult(out, None, None, fully_masked, mats)


def estimate(call: AttentionCall) -> cost.Estimate:
    """Time and extra bytes of :func:`run` (terms in :mod:`attnkit.core.cost`): all L·S pairs are
    computed unless ``is_causal`` is exact, whose kernel skips whole 512-key tiles; any other mask
    or bias is built densely, folded together and scanned for empty rows."""
    B, H, _, L, S, E, Ev = cost.dims(call)
    dt = call.q.dtype
    pairs = B * H * L * S
    elem = cost.RATES["elem_per_s"]
    es = call.q.element_size()
    nbytes = 0.0
    time_s = cost.RATES["call_overhead_s"]["sdpa"]
    mask, bias = call.mask, call.bias
    if mask is not None and _uses_is_causal(call):
        kept, _ = kept_fraction(mask, L, S, 512, 512)
        time_s += 2 * pairs * (E + Ev) * kept / cost.rate("sdpa_flops", dt)
    else:
        time_s += 2 * pairs * (E + Ev) / cost.rate("sdpa_flops", dt)
        n_mask = cost.extent(mask, B, H, L, S) if mask is not None else 0
        if mask is not None:
            time_s += n_mask * (cost.MASK_OPS + 2) / elem  # evaluate the predicate, find empty rows
            nbytes += n_mask  # one bool per element
        if bias is not None:
            n = max(cost.extent(bias, B, H, L, S), n_mask)
            time_s += n * (cost.bias_ops(bias) + 3) / elem  # build, fold mask in, scan for empty rows
            nbytes += 2 * n * es  # the bias and its masked copy
        if mask is not None or bias is not None:
            time_s += pairs * 1.0 / elem  # the kernel reads the dense mask for every score
    nbytes += B * H * L * Ev * es  # output
    return {"time_s": time_s, "bytes": float(nbytes)}
