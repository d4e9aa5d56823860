"""PyTorch's fused ``scaled_dot_product_attention`` as a backend.

SDPA computes ``softmax(q kᵀ · scale + attn_mask) v`` with one optional mask: a bool tensor or an
additive float tensor. So this backend serves every score with a dot-product form (dot, scaled dot,
general via ``q W``, cosine via normalised q and k) and every mask and additive bias, by
translating them:

* causal masks use ``is_causal=True`` only where that is exact (top-left alignment, or L == S);
  bottom-right causal with L != S becomes a dense bool mask;
* other masks become one dense bool (B|1, H|1, L, S) tensor and biases a float one; masks are
  folded into the bias as -inf. The float mask is 4-D on purpose: a 3-D (H, L, S) mask silently
  drops CPU SDPA to its math path (3–6× slower, O(H·L·S) memory, measured with torch 2.13).
* fully masked rows are unmasked for the kernel and zeroed afterwards, so no backend version can
  produce NaN for them, in the output or in the gradients.

On CPU (no dropout, outside torch.func) the kernel is the fused flash op called through
:mod:`.sdpa_flash`: it returns the log-sum-exp with its gradient (attention sinks need it), takes
E != Ev and learned biases, and its float32 gradients stay within the plain softmax's own error when
|lse| is large (there the backward reruns in float64). GQA calls that need neither a gradient nor
the lse keep the public function, which broadcasts kv heads without a copy.

Two guards run before the kernel, both O(n) (benchmarks/results/reliability_cost.json):

* layout: CPU's fused op reads the head dim of q, k, v as unit-stride without checking, so a last
  dim that is sliced, transposed in storage or broadcast is copied first (:func:`.blockwise.kernel.layout.kernel_layout`, the check the blockwise routes share);
  any other strides (permuted or broadcast batch, head and sequence dims) are read as they are;
* NaN/inf: a sum of q, k and v (:mod:`.nonfinite`); when an input holds a NaN or inf that some
  query may see, the call gets the reference's result instead (the fused op returns 0, not NaN,
  for an unmasked query row holding a NaN).

Repeated plain calls (no bias, score, sinks or GQA; a signature :mod:`attnkit.core.call_cache` has
seen) run a plan kept per signature (:mod:`.sdpa_plan`): the prepared mask, its additive form
and the layout decisions are taken once, and each call pays only the NaN/inf check (merged with
the dead keys' bound when the mask has dead keys), the kernel and the empty rows' fills.

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
from . import sdpa_flash, sdpa_mask_cache, sdpa_plan
from .blockwise.kernel.layout import kernel_layout
from .nonfinite import needs_exact, run_exact


def _fused(call: AttentionCall) -> bool:
    """Whether :func:`run` calls CPU's fused op through :mod:`.sdpa_flash` (out and lse both
    differentiable). It has no dropout and no batching rule (torch.func would loop over it)."""
    return (sdpa_flash.available() and call.q.device.type == "cpu" and call.dropout_p == 0
            and not _functorch_wrapped(call.q))


def lse_differentiable(call: AttentionCall) -> bool:
    """Does :func:`run` return an lse for this call that gradients flow through? Attention sinks
    (applied in the core from the lse, :mod:`attnkit.core.sinks`) need one: d(lse) carries the sink's
    share of the gradients of q and k."""
    return _fused(call)


def supports(call: AttentionCall) -> str | None:
    if call.sinks is not None and not lse_differentiable(call):
        return ("SDPA returns a differentiable log-sum-exp, which attention sinks need, only from CPU's fused op "
                "(not with dropout, on other devices or inside torch.func transforms); reference or blockwise can")
    if call.return_weights:
        return "SDPA does not return attention weights (return_weights=True); reference or blockwise can"
    if not call.score.dot_form:
        return f"score {call.score.name!r} has no dot-product form (SDPA computes only q·kᵀ)"
    if call.bias is not None and not call.bias.additive:
        return f"bias {type(call.bias).__name__} is a general score_mod, not additive; SDPA takes only an additive float mask"
    return None


def _uses_is_causal(call: AttentionCall) -> bool:
    """Whether the causal mask can go to the kernel as ``is_causal``. Not for ``scale <= 0``: the
    kernel's causal path then returns NaN in every row but the first (torch 2.13, CPU), where the
    same mask as a dense bool tensor is exact."""
    m = call.mask
    return (isinstance(m, CausalMask) and call.bias is None and (m.align == "top_left" or call.L == call.S)
            and call.scale > 0)


_HALF = (torch.float16, torch.bfloat16)


def work_dtype(call: AttentionCall) -> torch.dtype:
    """float32 for half inputs whenever the half kernel would lose accuracy: an added bias (kept in
    float32: an ALiBi bias rounded to bf16 moves outputs 0.1), a score that transforms q and k, or a
    backward on CPU (CPU's half backward sums dk, dv in half; CUDA's flash and memory-efficient
    backwards accumulate in float32; with the float32 detour, auto took 9.3 ms for a causal n=8k bf16
    forward+backward on an H200 where SDPA's own bf16 kernel took 0.8 ms, benchmarks/results/gpu_race.json). A plain forward keeps
    the fast half kernel, whose error equals the reference's own."""
    dt = call.q.dtype
    if dt not in _HALF:
        return dt
    grad = (call.q.device.type == "cpu" and torch.is_grad_enabled()
            and any(t.requires_grad for t in (call.q, call.k, call.v)))
    if call.bias is not None or not call.score.identity_dot or grad:
        return torch.float32
    return dt


def _functorch_wrapped(t: torch.Tensor) -> bool:
    # Dynamo cannot trace this query; inside a compiled graph no functorch wrapper is visible anyway
    return not torch.compiler.is_compiling() and torch._C._functorch.is_functorch_wrapped_tensor(t)


def _make_plan(call: AttentionCall) -> sdpa_plan.Plan | None:
    q, k, v = call.q, call.k, call.v
    if (call.bias is not None or call.sinks is not None or not _fused(call) or not call.score.identity_dot
            or work_dtype(call) != q.dtype or call.groups != 1 or q.shape[-1] != v.shape[-1]
            or any(kernel_layout(t) is not t for t in (q, k, v))):
        return None
    B, H, L, S = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    is_causal = call.mask is not None and _uses_is_causal(call)
    if call.mask is None or is_causal:
        if is_causal and L < S:
            return None  # keys no query sees are zeroed every call: the general path
        return sdpa_plan.Plan(is_causal, None, None, False, ())
    if q.dtype not in (torch.float32, torch.float64) or not (
            sdpa_mask_cache.plain_strides(k) and sdpa_mask_cache.plain_strides(v) and sdpa_mask_cache.plain_strides(q)):
        return None
    prep = sdpa_mask_cache.prepared(call.mask, B, H, k.shape[1], L, S, q)
    if prep.allowed.numel() > sdpa_mask_cache.MAX_ELEMENTS:
        return None
    am = prep.additive_mask(q.dtype)
    return sdpa_plan.Plan(False, prep, am.expand(am.shape[0], am.shape[1], L, S), prep.any_dead, (materialized("mask", prep.allowed),))


def run(call: AttentionCall) -> BackendResult:
    plan = sdpa_plan.plan_of(call, _make_plan)
    if plan is not None:
        return sdpa_plan.run_planned(call, plan)
    if needs_exact(call):  # NaN/inf in q, k or v: the fused op would zero a NaN query row (..nonfinite)
        return run_exact(call)
    dt = call.q.dtype
    work = work_dtype(call)
    q, k, v = call.q.to(work), call.k.to(work), call.v.to(work)
    B, H, L, S = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    mats = []
    attn_mask = None
    empty_rows = None
    allowed = prep = None
    is_causal = call.mask is not None and _uses_is_causal(call)
    if is_causal and L < S:
        # top-left causal: keys L.. are seen by no query; the kernel's tiles may still multiply them by 0
        dead = torch.arange(S, device=k.device).view(S, 1) >= L
        k, v = k.masked_fill(dead, 0.0), v.masked_fill(dead, 0.0)
    elif call.mask is not None and not is_causal:
        # the dense mask, dead keys and empty rows, reused across calls with the same mask (.sdpa_mask_cache)
        prep = sdpa_mask_cache.prepared(call.mask, B, H, k.shape[1], L, S, q)
        allowed = prep.allowed
        mats.append(materialized("mask", allowed))
        # what the mask removes must not reach the output or the gradients: 0 * NaN in p @ v is NaN,
        # and a score's transform of k (cosine's norm) turns a NaN key into NaN gradients, so zero
        # dead keys and values before anything touches them
        # dead keys that provably cannot reach the result are left in place (.sdpa_mask_cache.dead_keys_inert);
        # the fill's copy also hands the kernel contiguous k, v, so it is skipped only where they already are
        contiguous = sdpa_mask_cache.plain_strides(k) and sdpa_mask_cache.plain_strides(v)
        if not (contiguous and (not prep.any_dead or sdpa_mask_cache.dead_keys_inert(call, q, k, v))):
            k, v = k.masked_fill(prep.dead, 0.0), v.masked_fill(prep.dead, 0.0)
    q, k = call.score.as_dot(q, k)
    if allowed is not None or call.bias is not None:
        if call.bias is not None:
            attn_mask = call.bias.materialize(L, S, batch=B, heads=H, device=q.device, dtype=work)
            mats.append(materialized("bias", attn_mask))
            if allowed is not None:
                attn_mask = attn_mask.masked_fill(~allowed, float("-inf"))  # overwrites NaN a bias holds there
            # a row is empty when nothing is left to see; a NaN entry is not -inf, so NaN rows stay NaN
            empty_rows = ~(attn_mask != float("-inf")).any(-1)  # (B|1, H|1, L)
            attn_mask = attn_mask.masked_fill(empty_rows.unsqueeze(-1), 0.0)
        else:
            empty_rows, attn_mask = prep.empty_rows, prep.kernel_mask
    if empty_rows is not None:
        # a query row that may see no key is unmasked for the kernel, so its scores are real products:
        # zero it, or a huge or NaN q there would reach dk through the backward (0 · inf)
        q = q.masked_fill(empty_rows.unsqueeze(-1), 0.0)
    lse = None
    # CPU's fused kernel also returns the log-sum-exp that the public function drops, and through
    # .sdpa_flash its gradients are as accurate as the plain softmax's in float32, the lse's and a
    # learned bias's included. For GQA that path repeats k and v per query head, so a GQA call with
    # E == Ev that needs neither a gradient nor the sinks' lse keeps the public function, whose
    # enable_gqa reads kv head h // groups without a copy (with E != Ev it would run the math path).
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    # both paths need a unit-stride head dim: the private op misreads any other, the public function
    # takes its math path, less exact at large logits (fuzz: small budget, seed 1, case 4754)
    q, k, v = kernel_layout(q), kernel_layout(k), kernel_layout(v)
    if _fused(call) and (call.groups == 1 or grad or call.sinks is not None or q.shape[-1] != v.shape[-1]):
        if prep is not None and attn_mask is prep.kernel_mask:
            attn_mask = prep.additive_mask(work)
        elif attn_mask is not None and attn_mask.dtype == torch.bool:
            attn_mask = torch.zeros((), dtype=work, device=q.device).masked_fill(~attn_mask, float("-inf"))
        if attn_mask is not None:
            attn_mask = attn_mask.expand(attn_mask.shape[0], attn_mask.shape[1], L, S)
        out, lse = sdpa_flash.flash_attention_cpu(q, k, v, attn_mask, is_causal, call.scale, call.groups)
    else:
        # enable_gqa reads kv head h // groups without a copy
        kwargs = {"enable_gqa": True} if call.groups > 1 else {}
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=call.dropout_p, is_causal=is_causal, scale=call.scale, **kwargs,
        )
    fully_masked = None
    if empty_rows is not None:  # branch-free: a count tensor, never read on the host here
        out = out.masked_fill(empty_rows.unsqueeze(-1), 0.0)
        fully_masked = empty_rows.expand(B, H, L).sum()
        if lse is not None:
            lse = lse.masked_fill(empty_rows, float("-inf"))
    return BackendResult(out.to(dt), None, lse, fully_masked if fully_masked is not None else 0, mats)


_MASK_READ_OPS = 0.1  # element-wise passes per score the kernel spends reading a prepared additive mask


def _mask_kept(call: AttentionCall, n_mask: int) -> bool:
    """Whether :func:`run` reuses this call's prepared mask from an earlier call of the same mask and
    shapes (:mod:`.sdpa_mask_cache`: attnkit's own mask kinds, up to MAX_ELEMENTS), so a model's
    repeated calls pay to build it once. A custom predicate is built every call."""
    return (call.mask is not None and n_mask <= sdpa_mask_cache.MAX_ELEMENTS
            and sdpa_mask_cache._cacheable(call.mask, call.q) is not None)


def estimate(call: AttentionCall) -> cost.Estimate:
    """Time and extra bytes of :func:`run` (terms in :mod:`attnkit.core.cost`): all L·S pairs are
    computed unless ``is_causal`` is exact, whose kernel skips whole 512-key tiles; any other mask
    or bias is built densely, folded together and scanned for empty rows."""
    B, H, _, L, S, E, Ev = cost.dims(call)
    dt = work_dtype(call)  # half inputs with a bias, a transformed score or a backward run in float32
    pairs = B * H * L * S
    elem = cost.RATES["elem_per_s"]
    es = dt.itemsize  # the bias and the kernel run in the work dtype
    nbytes = 0.0
    time_s = cost.RATES["call_overhead_s"]["sdpa"]
    mask, bias = call.mask, call.bias
    if mask is not None and _uses_is_causal(call):
        kept, _ = kept_fraction(mask, L, S, 512, 512)
        time_s += 2 * pairs * (E + Ev) * kept / cost.rate("sdpa_flops", dt)
    else:
        time_s += 2 * pairs * (E + Ev) / cost.rate("sdpa_flops", dt)
        n_mask = cost.extent(mask, B, H, L, S) if mask is not None else 0
        kept = bias is None and _mask_kept(call, n_mask)
        if mask is not None:
            if not kept:  # evaluate the predicate, find dead keys and empty rows, unmask them
                time_s += n_mask * (cost.MASK_OPS + 4) / elem
            nbytes += n_mask  # one bool per element
        if bias is not None:
            n = max(cost.extent(bias, B, H, L, S), n_mask)
            time_s += n * (cost.bias_ops(bias) + 4) / elem  # build, fold mask in, scan for empty rows, unmask them
            nbytes += 2 * n * es  # the bias and its masked copy
        if kept:
            # the prepared additive mask, kept from an earlier call: the kernel only reads it (n = 128,
            # B = 1, H = 8: 359 µs with it, 351 µs without, float32, 1 thread, torch 2.13)
            time_s += pairs * _MASK_READ_OPS / elem
        elif mask is not None or bias is not None:
            time_s += pairs * 1.0 / elem  # the kernel reads the dense mask for every score
    nbytes += B * H * L * Ev * es  # output
    return {"time_s": time_s, "bytes": float(nbytes)}
