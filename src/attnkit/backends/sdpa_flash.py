"""CPU's fused flash-attention op with float32 gradients as accurate as the plain softmax's, and
a differentiable lse.

The ``sdpa`` backend calls ``torch.ops.aten._scaled_dot_product_flash_attention_for_cpu`` (the
kernel behind ``F.scaled_dot_product_attention`` on CPU, which also returns the log-sum-exp). Its
own autograd formula calls ``..._for_cpu_backward``, which rebuilds the weights from the stored lse:

    P'_ij = exp(s_ij - lse_r_i),     lse_r = fl32(lse): off by up to ulp(|lse|)/2

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E = Ev head dim.

**Why large |lse| breaks it.** ``P' = P · (1 + δ_i)``: the rounding of lse is one relative error
for a whole row, the same sign for every key, so it does not average out in ``dv = P'ᵀ dO`` the way
independent roundings do. For |lse| ≈ 300 it is ≈ 1.5e-5 (≈ 128 float32 ulps); the fuzz measured
dv up to 7.7× over twice the float32 reference's own error. Rescaling dO by ``1 / Σ_j P'_ij`` cannot
repair it: the op's forward and backward round the scores ``s · scale + mask`` differently (at the
size of lse), so even with the mask shifted by ``-lse`` and an lse re-measured by the forward op the
backward's weights missed summing to 1 by 1.8e-5 (measured, L=8, S=16, |lse| 55–195).

**The scale goes into q.** The op's forward and backward also apply ``scale`` with different
roundings, so the backward's scores differ from the forward's even where lse is small: with
E = 32 (scale 1/√32), a document mask and a Shaw bias at |lse| ≈ 14, dv came out 1.8e-5 off,
1.8x the fuzz's tolerance, where the plain float32 softmax was 5e-7 off (seed 2, case 2603 of the
full budget). Called on ``q · scale`` with its own scale at 1, forward and backward compute the same
scores: dv 6.0e-7 there, and over 600 random masked and biased calls (L ≤ 64, S ≤ 128, logits of
std 1–3, the rerun below disabled) the worst dv went from 2.6 to 0.51 of the tolerance. So float32
calls with gradients run the op that way (:func:`forward`) and multiply dq by the scale. Rounding
``q · scale`` perturbs each query by half an ulp (exact where the scale is a power of two, E = 16,
64, 256), which moves a weight by about eps times its logit: below the reference's own error for
|lse| up to :data:`LSE_EXACT_ABOVE` (logits of a row are at most its lse, up to its own log-sum),
but not for the large logits above it (an output 1.2x its tolerance at logits of std 10: seed 0,
case 6266 of the small budget). A call whose folded lse exceeds the threshold is therefore run
again with the scale in the op for its output, and its backward reruns in float64 as below.

**What runs.** In float32, when ``max |lse| > LSE_EXACT_ABOVE`` (32) the backward repeats the
forward op in float64 and runs the backward op there, then rounds the gradients to float32 (inside
a compiled graph always, where the test would be a data-dependent branch). Forward + backward of
such a call took 3.6–3.8× an ordinary one of the same shape (B=1, H=8, E=64, n=256–1024, one
thread, timed interleaved: benchmarks/results/reliability_cost_backward.json, ``rerun_over_ordinary``). Below it the
lse's own rounding moves a row's weights by at most ulp(32)/2 = 2^-19, the fuzz's 16-ulp floor,
and the folded op keeps forward and backward consistent: over 540 small random calls
(benchmarks/reliability_cost.py ``--backward --accuracy``, the rerun disabled) the fused backward's
worst error over the fuzz tolerance was 0.66 for the 92 with |lse| in [8, 16), 0.79 for the 199 in
[16, 32), 1.00 in [32, 64) and 1.38 in [64, 128). The threshold was 16 before the scale was folded
(then [16, 32) reached 1.43); calls with |lse| of 24–31 now cost 0.98–1.02 of an ordinary one where
they paid the rerun (``mid_over_ordinary``). So ordinary calls, and the peaked rows of trained
models up to |lse| 32, pay nothing.

**Gradient into lse.** ``d lse_i / d s_ij = P_ij``, so a gradient ``g`` on lse adds ``P ∘ g_i`` to
``dS = P ∘ (dP - D)``, where ``D = rowsum(dO ∘ out)`` is the op's only use of ``out``. The op takes
it through one extra value column: ``v' = [v, 0]``, ``dO' = [dO, 1]`` and ``out' = [out, -g]``
leave ``dP = dO vᵀ`` unchanged and make ``D' = D - g``; q and k get a zero column so the op's
E == Ev holds and the scores are unchanged. Attention sinks need this (:mod:`attnkit.core.sinks`
scales the output by ``sigmoid(lse - sink)``).

**Learned masks.** The op has no gradient for its float mask; when the mask needs one (a learned
bias such as T5's table) the backward writes ``dS = P ∘ (dP - D + g)`` out densely, O(B·H·L·S)
like the mask itself.

**GQA.** The op has no kv-head broadcast: k and v are repeated to H heads inside the forward (an
O(H·S·E) copy) and the backward sums dk, dv back over each group.
"""

from __future__ import annotations

import torch

_FWD = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)  # (out, lse)
_BWD = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)

# float32 |lse| above which the backward runs in float64 (module docstring)
LSE_EXACT_ABOVE = 32.0


def available() -> bool:
    return _FWD is not None and _BWD is not None


def _repeat_kv(t: torch.Tensor, groups: int) -> torch.Tensor:
    """(B, Hkv, S, E) -> (B, Hkv·groups, S, E), query head h reading kv head h // groups."""
    return t if groups == 1 else t.repeat_interleave(groups, dim=1)


def _sum_groups(t: torch.Tensor, groups: int) -> torch.Tensor:
    """(B, H, S, E) -> (B, H // groups, S, E): the gradient of :func:`_repeat_kv`."""
    if groups == 1:
        return t
    B, H, S, E = t.shape
    return t.reshape(B, H // groups, groups, S, E).sum(2)


def needs_lse_correction(lse: torch.Tensor) -> bool:
    """Whether the backward should run in float64 because of the float32 rounding of ``lse``
    (B, H, L). Inside a compiled graph the test would be a data-dependent branch, so there it
    always does."""
    if lse.dtype != torch.float32 or lse.numel() == 0:
        return False
    if torch.compiler.is_compiling():
        return True
    finite = torch.where(torch.isfinite(lse), lse, torch.zeros((), dtype=lse.dtype))
    return bool(finite.abs().max() > LSE_EXACT_ABOVE)


def flash_backward(d_out, d_lse, q, k, v, attn_mask, is_causal: bool, scale: float, out, lse, mask_grad: bool = False,
                   folded: bool = False):
    """(dq, dk, dv, d_mask) of ``out`` and ``lse`` for q, k, v of H heads each (module docstring);
    d_mask is None unless ``mask_grad``. ``folded``: out and lse came from the op run on
    ``q · scale`` with its scale at 1 (:func:`forward`), and the backward runs the same way."""
    dt = q.dtype
    unscale = 1.0  # dq of the op's q is dq / unscale of the caller's
    if folded:  # as the forward ran: the scale in q, the op's at 1 (module docstring)
        q, unscale, scale = q * scale, scale, 1.0
    elif needs_lse_correction(lse):
        # the weights' rounding is then larger than the reference's: redo the call in float64
        q, k, v = q.double(), k.double(), v.double()
        attn_mask = None if attn_mask is None else attn_mask.double()
        out, lse = _FWD(q, k, v, 0.0, is_causal, attn_mask=attn_mask, scale=scale)
        d_out = d_out.double()
        d_lse = None if d_lse is None else d_lse.double()
    with_lse = d_lse is not None and bool(torch.compiler.is_compiling() or d_lse.any())
    if not with_lse:
        grads = _BWD(d_out, q, k, v, out, lse, 0.0, is_causal, attn_mask=attn_mask, scale=scale)
    else:
        # one more value column carries d_lse through D = rowsum(dO ∘ out); q and k get a zero one
        pad = lambda t: torch.nn.functional.pad(t, (0, 1))  # noqa: E731 - (..., E) -> (..., E + 1)
        d_out_x = torch.cat([d_out, torch.ones_like(d_out[..., :1])], dim=-1)
        out_x = torch.cat([out, -d_lse.unsqueeze(-1).to(out.dtype)], dim=-1)
        grads = [g[..., :-1] for g in _BWD(d_out_x, pad(q), pad(k), pad(v), out_x, lse, 0.0, is_causal,
                                             attn_mask=attn_mask, scale=scale)]
    d_mask = None
    if mask_grad:
        # the op does not return dS = P ∘ (dO vᵀ - D + d_lse), the gradient of an additive mask:
        # written out, O(B·H·L·S) like the dense mask itself
        s = q @ k.transpose(-1, -2) * scale + attn_mask  # (B, H, L, S)
        if is_causal:
            L, S = s.shape[-2:]
            s = s.masked_fill(torch.ones(L, S, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
        p = torch.exp(s - lse.unsqueeze(-1))
        shift = (d_out * out).sum(-1, keepdim=True)  # D (B, H, L, 1)
        if with_lse:
            shift = shift - d_lse.unsqueeze(-1)
        d_mask = (p * (d_out @ v.transpose(-1, -2) - shift)).to(dt)
    dq = grads[0] if unscale == 1.0 else grads[0] * unscale
    return (dq.to(dt), *(g.to(dt) for g in grads[1:]), d_mask)


def forward(q, k, v, attn_mask, is_causal: bool, scale: float) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """(out, lse, folded) of the op for q, k, v of H heads each, as its backward should rerun it:
    float32 calls run on ``q · scale`` with the op's scale at 1 (``folded``), so that forward and
    backward round the scores alike, unless |lse| then exceeds :data:`LSE_EXACT_ABOVE`: such a
    call's backward reruns in float64 anyway, and its output is recomputed with the scale in the op,
    where rounding ``q · scale`` would perturb logits of that size by more than the reference's own
    error (module docstring). Inside a compiled graph (no data-dependent branch) never folded."""
    if q.dtype != torch.float32 or torch.compiler.is_compiling():
        return (*_FWD(q, k, v, 0.0, is_causal, attn_mask=attn_mask, scale=scale), False)
    out, lse = _FWD(q * scale, k, v, 0.0, is_causal, attn_mask=attn_mask, scale=1.0)
    if not needs_lse_correction(lse):
        return out, lse, True
    return (*_FWD(q, k, v, 0.0, is_causal, attn_mask=attn_mask, scale=scale), False)


class _FlashCPU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, attn_mask, is_causal: bool, scale: float, groups: int):
        k_h, v_h = _repeat_kv(k, groups), _repeat_kv(v, groups)  # (B, H, S, E)
        out, lse, folded = forward(q, k_h, v_h, attn_mask, is_causal, scale)
        ctx.save_for_backward(q, k_h, v_h, attn_mask, out, lse)
        ctx.is_causal, ctx.scale, ctx.groups, ctx.folded = is_causal, scale, groups, folded
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    def backward(ctx, d_out, d_lse):
        q, k_h, v_h, attn_mask, out, lse = ctx.saved_tensors
        if d_out is None:
            d_out = torch.zeros_like(out)
        dq, dk, dv, d_mask = flash_backward(d_out.contiguous(), d_lse, q, k_h, v_h, attn_mask, ctx.is_causal, ctx.scale,
                                            out, lse, mask_grad=ctx.needs_input_grad[3], folded=ctx.folded)
        return dq, _sum_groups(dk, ctx.groups), _sum_groups(dv, ctx.groups), d_mask, None, None, None


def flash_attention_cpu(q, k, v, attn_mask: torch.Tensor | None, is_causal: bool, scale: float, groups: int = 1):
    """(out (B, H, L, Ev), lse (B, H, L)) of CPU's fused kernel, both differentiable.

    q (B, H, L, E), k (B, Hkv, S, E) and v (B, Hkv, S, Ev) with H = Hkv · groups, unit-stride last
    dims; ``attn_mask`` None or an additive float (B, H, L, S), a learned one included. The op
    needs E == Ev: the narrower side gets zero columns (q and k: the scores are unchanged; v: the
    extra output columns are dropped)."""
    E, Ev = q.shape[-1], v.shape[-1]
    if E < Ev:
        q, k = (torch.nn.functional.pad(t, (0, Ev - E)) for t in (q, k))
    elif E > Ev:
        v = torch.nn.functional.pad(v, (0, E - Ev))
    inputs = (q, k, v) if attn_mask is None else (q, k, v, attn_mask)
    if torch.is_grad_enabled() and any(t.requires_grad for t in inputs):
        out, lse = _FlashCPU.apply(q, k, v, attn_mask, is_causal, scale, groups)
    else:  # nothing to differentiate: the kernel alone (the autograd function's bookkeeping is ~10 µs a call)
        out, lse = _FWD(q, _repeat_kv(k, groups), _repeat_kv(v, groups), 0.0, is_causal, attn_mask=attn_mask, scale=scale)
    return out[..., :Ev], lse
