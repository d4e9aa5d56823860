"""The blockwise backend's cost estimate: time and extra bytes of one call, for ``auto`` dispatch.

Terms and rates are the shared ones of :mod:`attnkit.core.cost`. What is blockwise's own: only
the tiles the mask keeps are computed (:func:`attnkit.core.tiles.kept_fraction` on the tile sizes
blockwise would use), partly masked tiles evaluate the mask, a relative-position bias is evaluated
once per tile diagonal rather than once per tile, every Python-level tile costs a fixed overhead
(why blockwise loses below ~1k tokens), and memory is O(n): accumulators, the output and a few
tiles. Calls the fused CPU kernel serves (:mod:`.fused_function`) are estimated at that kernel's
rates instead, and the estimate names the path (``"path"``), which ``auto``'s report repeats.

Shape legend: B batch, H heads, L queries, S keys, E/Ev head dims; bq × bk one tile.
"""

from __future__ import annotations

import math

from ...core import cost
from ...core.call import AttentionCall
from ...core.tiles import kept_fraction
from ..tiling import default_tiles
from .fused_band import CHUNK_ELEMS, chunks, tuned
from .fused_function import PATH_NAMES, FusedRoute, route_of

_SOFTMAX_OPS = 0.0  # the online softmax's passes are inside the measured flops rate


def estimate(call: AttentionCall) -> cost.Estimate:
    route = route_of(call)
    if route is not None:
        return _fused_estimate(call, route)
    B, H, _, L, S, E, Ev = cost.dims(call)
    bq, bk = default_tiles(call.mask, L, S, call.q.dtype, call.q.device)
    kept, evaluated = kept_fraction(call.mask, L, S, bq, bk)
    pairs = B * H * L * S
    elem = cost.RATES["elem_per_s"]
    nq, nk = math.ceil(L / bq), math.ceil(S / bk)
    n_tiles = nq * nk * kept + nq
    time_s = cost.RATES["call_overhead_s"]["blockwise"] + n_tiles * cost.RATES["tile_overhead_s"]
    time_s += 2 * pairs * (E + Ev) * kept / cost.rate("blockwise_flops", call.q.dtype)
    bias_ops = cost.bias_ops(call.bias)
    if cost.relative_bias(call.bias):
        # evaluated once per tile diagonal (nq + nk of them), not once per kept tile
        bias_ops *= min(1.0, (nq + nk) / max(nq * nk * kept, 1.0))
    time_s += pairs * kept * (_SOFTMAX_OPS + bias_ops + cost.score_ops(call)) / elem
    if call.mask is not None:
        time_s += cost.extent(call.mask, B, H, L, S) * evaluated * cost.MASK_OPS / elem
    if call.dropout_p > 0:
        time_s += pairs * kept * 4 / elem  # draw, compare, scale, multiply
    # accumulators (B, H, l, Ev + 2) per query block, the output, the lse and a handful of (B, H, l, s) tiles
    tile_bytes = 6 * B * H * bq * bk * 4
    nbytes = B * H * L * Ev * call.q.element_size() + B * H * bq * (Ev + 2) * 4 + B * H * L * 4 + tile_bytes
    if call.return_weights:
        nbytes += pairs * 8
    return {"time_s": time_s, "bytes": float(nbytes), "path": "Python tile loop"}


def _fused_estimate(call: AttentionCall, route: FusedRoute) -> cost.Estimate:
    """Time and bytes of the fused-kernel path (:mod:`.fused_function`): flops over the pairs the
    kernel computes, one overhead per kernel call, and memory of the output, lse and one chunk."""
    B, H, _, L, S, E, Ev = cost.dims(call)
    out_bytes = B * H * L * Ev * call.q.element_size() + B * H * L * 4
    if route.kind == "band":
        band = tuned(route.band, call.q.dtype)  # the block size and padding the forward runs
        computed = B * H * L * band.w  # every query block against its b + left + right (+ pad) keys
        calls = B * len(chunks(band, H, E)) + len(band.edges())
        rate = cost.rate("fused_band_flops", call.q.dtype)
        extra = 3 * CHUNK_ELEMS * 4
    elif route.kind == "causal":
        off = route.causal_off
        seen = max(min(L, S - max(off, 0)), 0) if off >= 0 else max(min(L + off, S), 0)
        # the kernel skips key tiles past the diagonal in 512-key steps: half a tile per row more
        computed = B * H * (L * max(off, 0) + seen * seen / 2 + seen * min(seen, 256))
        calls, rate = 1 + (off > 0), cost.rate("fused_flops", call.q.dtype)
        extra = B * H * L * Ev * call.q.element_size() + 3 * B * H * min(L, 2048) * Ev * 4 if off > 0 else 0
    elif route.kind == "tiles":
        segs = route.segments
        computed, calls, rate = B * H * segs.pairs, segs.calls, cost.rate("fused_band_flops", call.q.dtype)
        partial = sum((q1 - q0) * (k1 - k0) for q0, q1, ss in segs.blocks for k0, k1, full in ss if not full)
        extra = 3 * B * H * L * Ev * 4 // max(len(segs.blocks), 1) + 5 * B * partial // max(len(segs.blocks), 1)
    else:
        computed, calls, rate, extra = B * H * L * S, 1, cost.rate("fused_flops", call.q.dtype), 0
    time_s = cost.RATES["call_overhead_s"]["blockwise_fused"] + calls * cost.RATES["fused_call_overhead_s"]
    time_s += 2 * computed * (E + Ev) / rate
    if route.kind == "tiles":  # the mask evaluated on partial segments: predicate, select, additive copy
        time_s += cost.extent(call.mask, B, H, 1, 1) * partial * (cost.MASK_OPS + 2) / cost.RATES["elem_per_s"]
    return {"time_s": time_s, "bytes": float(out_bytes + extra), "path": PATH_NAMES[route.kind]}
