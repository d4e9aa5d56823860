r"""Any other mask that does not read the head, on the fused kernel per query block and segment of
non-empty key tiles, merged by log-sum-exp (the *tiles* route: documents, chunks, per-row
prefixes, padding, custom predicates, causal with ``scale <= 0``, ...).

The plan is the mask's segments (:mod:`..kernel.tiles`), read from its tile states once per
(mask, L, S) and kept in a cache (:mod:`..kernel.segments_cache`); a mask whose tile states
cannot be read (meta tensors) declines the route.

Gradients (a row's keys spread over several segments): below float64, each block's rows against
the whole span of its segments, weights rebuilt and renormalised as on the band's edges
(:mod:`..kernel.tiles_grad`), where the span is mostly allowed pairs, k and v are finite and the
work tensors stay bounded; otherwise, and for a gradient into ``lse`` on float64 inputs, the tile
loop's backward runs once (:func:`..kernel.lse_grads.kernel_lse_grads`), fed the kernel's lse as
the row shift and the row sums recomputed with that shift; in float64 without a gradient into
``lse``, the backward op per segment fed the global out and lse.

The estimate: the pairs the segments hold at the band rate, one call per segment, and the mask
evaluated on the partly masked segments (predicate, select, additive copy).

Shape legend: B batch, H query heads, L queries, S keys, E head dim (Ev = E).
"""

from __future__ import annotations

import torch

from ....core import cost
from ..kernel.eligible import mask_kernel_eligible
from ..kernel.lse_grads import kernel_lse_grads
from ..kernel.segments_cache import cached_segments
from ..kernel.tiles import Segments, tiles_backward, tiles_forward
from ..kernel.tiles_grad import span_grads
from .base import KernelRoute

__all__ = ["TilesRoute", "TILES"]


class TilesRoute(KernelRoute):
    """Plan: the mask's :class:`..kernel.tiles.Segments` (one object per mask and shape, cached)."""

    name = "fused kernel per query block on the mask's non-empty tiles, lse merge"

    def applies(self, call) -> bool:
        return call.mask is not None and "h" not in call.mask.dims and mask_kernel_eligible(call)

    def plan(self, call) -> Segments | None:
        return cached_segments(call.mask, call.L, call.S)  # cached per (mask, L, S)

    def plan_key(self, plan: Segments):
        return id(plan)  # the cache hands out one object per mask and shape; hashing it is O(tiles)

    def work(self, call, plan: Segments):
        B, H, _, L, _, _, Ev = cost.dims(call)
        nblocks = max(len(plan.blocks), 1)
        partial = sum((q1 - q0) * (k1 - k0) for q0, q1, ss in plan.blocks for k0, k1, full in ss if not full)
        extra = 3 * B * H * L * Ev * 4 // nblocks + 5 * B * partial // nblocks
        mask_s = cost.extent(call.mask, B, H, 1, 1) * partial * (cost.MASK_OPS + 2) / cost.RATES["elem_per_s"]
        return B * H * plan.pairs, plan.calls, cost.rate("fused_band_flops", call.q.dtype), extra, mask_s

    def forward(self, call, plan: Segments, q, k, v):
        return tiles_forward(q, k, v, call.mask, plan, call.scale)

    def backward(self, call, plan: Segments, dout, q, k, v, out, lse, dlse, need):
        if q.dtype != torch.float64:  # complete rows per block where that serves the call (..kernel.tiles_grad)
            grads = span_grads(dout, q, k, v, lse, dlse, call.mask, plan, call.scale, need)
            if grads is not None:
                return grads
        if dlse is not None or q.dtype != torch.float64:  # the tile loop's backward, fed the kernel's lse
            return kernel_lse_grads(q, k, v, lse, dout, dlse, need, call.mask, call.scale)
        grads = tiles_backward(dout.contiguous(), q, k, v, out, lse, call.mask, plan, call.scale)
        return [g if n else None for g, n in zip(grads, need)]


TILES = TilesRoute()
