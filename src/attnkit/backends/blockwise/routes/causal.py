"""A causal mask on the fused kernel (the *causal* route): one ``is_causal`` call, or for a cached
prefix (L < S, bottom-right) an unmasked prefix call beside an ``is_causal`` square merged by
log-sum-exp (:mod:`..kernel.causal`); gradients from weights renormalised per block of rows
(:mod:`..kernel.causal_grad`).

Not for ``scale <= 0``: the kernel's ``is_causal`` path then returns NaN (torch 2.13, CPU); such
masks take the *tiles* route, whose additive masks are exact for any scale.

Shape legend: B batch, H query heads, L queries, S keys, E head dim (Ev = E).
"""

from __future__ import annotations

from ....core import cost
from ....core.indices import alignment_offset
from ....core.mask_kinds import CausalMask
from ..kernel.causal import dense_forward
from ..kernel.causal_grad import causal_grads
from ..kernel.eligible import mask_kernel_eligible
from .base import KernelRoute

__all__ = ["CausalRoute", "CAUSAL", "causal_work"]


class CausalRoute(KernelRoute):
    """Plan: the key position of query 0 (``S - L`` bottom-right, 0 top-left)."""

    name = "fused kernel, causal (prefix + is_causal square, lse merge)"

    def applies(self, call) -> bool:
        return type(call.mask) is CausalMask and call.scale > 0 and mask_kernel_eligible(call)

    def plan(self, call) -> int:
        return alignment_offset(call.mask.align, call.L, call.S)

    def work(self, call, plan):
        B, H, _, L, S, _, Ev = cost.dims(call)
        computed, calls, extra = causal_work(B, H, L, S, Ev, plan, call.q.element_size())
        return computed, calls, cost.rate("fused_flops", call.q.dtype), extra, 0.0

    def forward(self, call, plan, q, k, v):
        return dense_forward(q, k, v, call.scale, plan)

    def backward(self, call, plan, dout, q, k, v, out, lse, dlse, need):
        return causal_grads(dout, q, k, v, lse, dlse, plan, call.scale, need)


def causal_work(B: int, H: int, L: int, S: int, Ev: int, off: int, itemsize: int) -> tuple[float, int, int]:
    """(pairs computed, kernel calls, extra bytes) of a causal call with query 0 at key ``off``."""
    seen = max(min(L, S - max(off, 0)), 0) if off >= 0 else max(min(L + off, S), 0)
    # the kernel skips key tiles past the diagonal in 512-key steps: half a tile per row more
    computed = B * H * (L * max(off, 0) + seen * seen / 2 + seen * min(seen, 256))
    extra = B * H * L * Ev * itemsize + 3 * B * H * min(L, 2048) * Ev * 4 if off > 0 else 0
    return computed, 1 + (off > 0), extra


CAUSAL = CausalRoute()
