"""A sliding window bounded on both sides on the fused kernel (the *band* route): interior query
blocks batched against overlapping strided views of their key windows with one shared (b, w) mask,
edge blocks one call each (:mod:`..kernel.band`); gradients from weights rebuilt per window and
renormalised (:mod:`..kernel.band_grad`).

The estimate: every query block against its b + left + right (+ pad) keys, one kernel call per
chunk of blocks and per edge block, at the measured band rate. That rate holds for 64-query
blocks; narrower blocks (a short window) run smaller GEMMs, slower per flop: window 64 (b = 32)
ran at 39 GFLOP/s where windows 128 and 256 (b = 64) ran at 69-75 (n = 2048, float32, 1 thread,
torch 2.13), so the rate scales with b.

Shape legend: B batch, H query heads, L queries, S keys, E head dim (Ev = E); b queries per block.
"""

from __future__ import annotations

from ....core import cost
from ....core.mask_kinds import SlidingWindowMask
from ..kernel.band import CHUNK_ELEMS, Band, band_forward, band_of, chunks, tuned
from ..kernel.band_grad import band_grads
from ..kernel.eligible import mask_kernel_eligible
from .base import KernelRoute

__all__ = ["BandRoute", "BAND", "FULL_RATE_BLOCK"]

FULL_RATE_BLOCK = 64  # band block size (queries) from which the band kernel runs at its measured rate


class BandRoute(KernelRoute):
    """Plan: the window's :class:`..kernel.band.Band` (None for a window open on one side)."""

    name = "fused kernel, banded windows per query block"

    def applies(self, call) -> bool:
        return type(call.mask) is SlidingWindowMask and mask_kernel_eligible(call)

    def plan(self, call) -> Band | None:
        return band_of(call.mask, call.L, call.S)

    def work(self, call, plan: Band):
        B, H, _, L, S, E, Ev = cost.dims(call)
        band = tuned(plan, call.q.dtype)  # the block size and padding the forward runs
        computed = B * H * L * band.w  # every query block against its b + left + right (+ pad) keys
        calls = B * len(chunks(band, H, E)) + len(band.edges())
        rate = cost.rate("fused_band_flops", call.q.dtype) * min(1.0, band.b / FULL_RATE_BLOCK)
        return computed, calls, rate, 3 * CHUNK_ELEMS * 4, 0.0

    def forward(self, call, plan: Band, q, k, v):
        return band_forward(q, k, v, call.mask, plan, call.scale)

    def backward(self, call, plan: Band, dout, q, k, v, out, lse, dlse, need):
        return band_grads(dout, q, k, v, lse, dlse, call.mask, plan, call.scale, need)


BAND = BandRoute()
