"""No mask, no bias: one call of the fused kernel over every key (the *dense* route).

The forward is :func:`..kernel.causal.dense_forward` with no causal offset; the gradients are
:func:`..kernel.causal_grad.causal_grads` with none (each block of rows against all the keys,
weights rebuilt from the backward's own scores and renormalised per row).

Shape legend: B batch, H query heads, L queries, S keys, E head dim (Ev = E).
"""

from __future__ import annotations

from ....core import cost
from ..kernel.causal import dense_forward
from ..kernel.causal_grad import causal_grads
from ..kernel.eligible import mask_kernel_eligible
from .base import KernelRoute

__all__ = ["DenseRoute", "DENSE"]


class DenseRoute(KernelRoute):
    name = "fused kernel, one call"

    def applies(self, call) -> bool:
        return call.mask is None and mask_kernel_eligible(call)

    def plan(self, call):
        return ()  # nothing to prepare: every pair, one call

    def work(self, call, plan):
        B, H, _, L, S, _, _ = cost.dims(call)
        return B * H * L * S, 1, cost.rate("fused_flops", call.q.dtype), 0, 0.0

    def forward(self, call, plan, q, k, v):
        return dense_forward(q, k, v, call.scale)

    def backward(self, call, plan, dout, q, k, v, out, lse, dlse, need):
        return causal_grads(dout, q, k, v, lse, dlse, None, call.scale, need)


DENSE = DenseRoute()
