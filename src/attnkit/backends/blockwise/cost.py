"""The blockwise backend's cost estimate: time and extra bytes of one call, for ``auto`` dispatch.

Terms and rates are the shared ones of :mod:`attnkit.core.cost`. What is blockwise's own: only
the tiles the mask keeps are computed (:func:`attnkit.core.tiles.kept_fraction` on the tile sizes
blockwise would use), partly masked tiles evaluate the mask, a relative-position bias is evaluated
once per tile diagonal rather than once per tile, every Python-level tile costs a fixed overhead
(why blockwise loses below ~1k tokens), and memory is O(n): accumulators, the output and a few
tiles. Calls the fused CPU kernel serves (:mod:`.fused_function`) are estimated at that kernel's
rates instead, and the estimate names the path (``"path"``), which ``auto``'s report repeats; so
are calls with a relative-position bias that :mod:`.fused_relative` runs on the kernel per query block,
and calls with any other additive bias that :mod:`.fused_custom` runs per query block and key chunk.

Shape legend: B batch, H heads, L queries, S keys, E/Ev head dims; bq × bk one tile.
"""

from __future__ import annotations

import math
import threading

from ...core import cost
from ...core.call import AttentionCall
from ...core.indices import alignment_offset
from ...core.mask_kinds import CausalMask, SlidingWindowMask
from ...core.tiles import kept_fraction
from ..tiling import default_tiles
from .fused_band import CHUNK_ELEMS, chunks, tuned
from .fused_function import PATH_NAMES, FusedRoute, route_of
from .fused_prefix_lm import split_rows
from .fused_custom import BLOCK as CUSTOM_BLOCK, PATH_NAME as CUSTOM_PATH, chunk_keys, custom_route_of
from .fused_relative import PATH_NAME as RELATIVE_PATH, RELATIVE_BLOCK, _eligible as _relative_eligible

_SOFTMAX_OPS = 0.0  # the online softmax's passes are inside the measured flops rate


def estimate(call: AttentionCall) -> cost.Estimate:
    route = route_of(call)
    if route is not None:
        return _fused_estimate(call, route)
    if _relative_applies(call):
        return _relative_estimate(call)
    custom = custom_route_of(call)
    if custom is not None:
        return _custom_estimate(call, custom)
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
    """:func:`_fused_estimate_of`, kept per (route, shapes, dtype, device's rates): a model repeats
    the same call in every layer, and for tiny calls working the estimate out (a band's chunks and
    edges) took ~20 µs (window, n = 64), a sixth of SDPA's whole kernel there. The route's segments
    are compared by identity (the route cache hands out one object per mask and shape; another
    object is another key)."""
    B, H, _, L, S, E, Ev = cost.dims(call)
    mask_extent = 0 if call.mask is None else cost.extent(call.mask, B, H, 1, 1)
    key = (route.kind, route.band, route.causal_off, route.prefix, id(route.segments), B, H, L, S, E, Ev, call.q.dtype,
           mask_extent, cost.current_device())
    with _LOCK:
        hit = _ESTIMATES.get(key)
    if hit is not None and hit[0] is route.segments:
        return dict(hit[1])  # a copy: the report hands estimates to users
    est = _fused_estimate_of(call, route)
    with _LOCK:
        _ESTIMATES[key] = (route.segments, dict(est))  # holds the segments: their id is not reused meanwhile
        while len(_ESTIMATES) > ESTIMATE_ENTRIES:
            _ESTIMATES.pop(next(iter(_ESTIMATES)))  # oldest first
    return est


ESTIMATE_ENTRIES = 256  # fused-route estimates kept
FULL_RATE_BLOCK = 64  # band block size (queries) from which the band kernel runs at its measured rate
_ESTIMATES: dict[tuple, tuple[object, cost.Estimate]] = {}
_LOCK = threading.Lock()


def _fused_estimate_of(call: AttentionCall, route: FusedRoute) -> cost.Estimate:
    """Time and bytes of the fused-kernel path (:mod:`.fused_function`): flops over the pairs the
    kernel computes, one overhead per kernel call, and memory of the output, lse and one chunk."""
    B, H, _, L, S, E, Ev = cost.dims(call)
    out_bytes = B * H * L * Ev * call.q.element_size() + B * H * L * 4
    if route.kind == "band":
        band = tuned(route.band, call.q.dtype)  # the block size and padding the forward runs
        computed = B * H * L * band.w  # every query block against its b + left + right (+ pad) keys
        calls = B * len(chunks(band, H, E)) + len(band.edges())
        # the measured rate holds for 64-query blocks; narrower blocks (a short window) run smaller
        # GEMMs, slower per flop: window 64 (b = 32) ran at 39 GFLOP/s where windows 128 and 256
        # (b = 64) ran at 69-75 (n = 2048, float32, 1 thread, torch 2.13), so the rate scales with b
        rate = cost.rate("fused_band_flops", call.q.dtype) * min(1.0, band.b / FULL_RATE_BLOCK)
        extra = 3 * CHUNK_ELEMS * 4
    elif route.kind == "causal":
        computed, calls, extra = _causal_work(B, H, L, S, Ev, route.causal_off, call.q.element_size())
        rate = cost.rate("fused_flops", call.q.dtype)
    elif route.kind == "prefix_lm":  # the prefix rows unmasked, the others causal (.fused_prefix_lm)
        r0, p = split_rows(L, S, route.causal_off, route.prefix)
        computed, calls, extra = _causal_work(B, H, L - r0, S, Ev, route.causal_off + r0, call.q.element_size())
        computed, calls = computed + B * H * r0 * p, calls + (r0 > 0)
        rate = cost.rate("fused_flops", call.q.dtype)
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


def _causal_work(B: int, H: int, L: int, S: int, Ev: int, off: int, itemsize: int) -> tuple[float, int, int]:
    """(pairs computed, kernel calls, extra bytes) of a causal call with query 0 at key ``off``."""
    seen = max(min(L, S - max(off, 0)), 0) if off >= 0 else max(min(L + off, S), 0)
    # the kernel skips key tiles past the diagonal in 512-key steps: half a tile per row more
    computed = B * H * (L * max(off, 0) + seen * seen / 2 + seen * min(seen, 256))
    extra = B * H * L * Ev * itemsize + 3 * B * H * min(L, 2048) * Ev * 4 if off > 0 else 0
    return computed, 1 + (off > 0), extra


def _relative_applies(call: AttentionCall) -> bool:
    """Whether the relative-bias route (:mod:`.fused_relative`) serves the call: the conditions of
    :func:`.fused_relative.relative_route_of` that need no bias value (a bias holding a NaN or inf,
    or inputs that are not finite, send the call to the tile loop when it runs)."""
    if not _relative_eligible(call, None, None):
        return False
    mask, bias = call.mask, call.bias
    return bias.relative and bias.dims <= {"h"} and (mask is None or (mask.shift_invariant and not mask.dims))


def _offset_range(mask, L: int, S: int) -> tuple[float, float]:
    """(lowest, highest) key - query offset ``mask`` allows, as far as its kind says (the full
    range for masks that do not declare it: an upper bound on the keys each block reads)."""
    lo, hi = -float("inf"), float("inf")
    if type(mask) is CausalMask:
        hi = alignment_offset(mask.align, L, S)
    elif type(mask) is SlidingWindowMask:
        off = alignment_offset(mask.align, L, S)
        lo = -float("inf") if mask.left is None else off - mask.left
        hi = float("inf") if mask.right is None else off + mask.right
    return lo, hi


def _relative_estimate(call: AttentionCall) -> cost.Estimate:
    """Time and bytes of the relative-bias route: one kernel call per block of RELATIVE_BLOCK queries
    against the keys its rows may see, at the rate ``fused_relative_flops`` (measured with the
    bias's view as the kernel's float mask), plus the bias evaluated once per offset (H · (L + S))."""
    B, H, _, L, S, E, Ev = cost.dims(call)
    l = min(RELATIVE_BLOCK, L)
    lo, hi = _offset_range(call.mask, L, S)
    computed, calls = 0, 0
    for q0 in range(0, L, l):
        q1 = min(q0 + l, L)
        k0, k1 = max(0, q0 + lo), min(S, q1 + hi)  # keys some row of the block may see
        if k1 > k0:
            computed += (q1 - q0) * int(k1 - k0)
            calls += 1
    n_off = H * (L + S - 1)  # the bias's values per offset, evaluated once
    time_s = cost.RATES["call_overhead_s"]["blockwise_fused"] + calls * cost.RATES["fused_call_overhead_s"]
    time_s += 2 * B * H * computed * (E + Ev) / cost.rate("fused_relative_flops", call.q.dtype)
    time_s += n_off * (cost.bias_ops(call.bias) + 2) / cost.RATES["elem_per_s"]
    # the output and lse, the offsets' values, and one block's flipped queries and output
    nbytes = B * H * L * Ev * call.q.element_size() + B * H * L * 4 + n_off * call.q.element_size()
    nbytes += 2 * B * H * l * Ev * call.q.element_size()
    return {"time_s": time_s, "bytes": float(nbytes), "path": RELATIVE_PATH}


# element-wise passes over a bias chunk of :data:`.fused_custom.CHUNK_ELEMS` run this many times faster
# than ``elem_per_s`` (whole-tensor passes): a log-distance custom bias (cost_per_element 8) at
# n = 8192, H = 8 evaluated its 537 M elements in 1.1-1.3 s (benchmarks/bias_and_small.py's allocator)
_CHUNK_ELEM_SPEEDUP = 3.0


def _custom_estimate(call: AttentionCall, route) -> cost.Estimate:
    """Time and bytes of the per-chunk bias route (:mod:`.fused_custom`): the kernel over the pairs
    the mask's non-empty tiles hold at ``fused_relative_flops`` (a float mask read per pair), one
    call per key chunk, the bias evaluated on every computed pair (at its own batch and head
    extent) and one pass writing the (B, H) mask; memory: the output, lse and one chunk buffer."""
    B, H, _, L, S, E, Ev = cost.dims(call)
    bias = call.bias
    nb, nh = (B if "b" in bias.dims else 1), (H if "h" in bias.dims else 1)
    step = chunk_keys(B * H * min(CUSTOM_BLOCK, L))
    calls = sum(-(-(k1 - k0) // step) for _, _, runs in route.blocks for k0, k1, _ in runs)
    pairs = route.pairs()
    time_s = cost.RATES["call_overhead_s"]["blockwise_fused"] + calls * cost.RATES["fused_call_overhead_s"]
    time_s += 2 * B * H * pairs * (E + Ev) / cost.rate("fused_relative_flops", call.q.dtype)
    time_s += (nb * nh * cost.bias_ops(bias) + B * H) * pairs / (_CHUNK_ELEM_SPEEDUP * cost.RATES["elem_per_s"])
    nbytes = B * H * L * Ev * call.q.element_size() + B * H * L * 4
    nbytes += B * H * min(CUSTOM_BLOCK, L) * min(step, S) * call.q.element_size()
    return {"time_s": time_s, "bytes": float(nbytes), "path": CUSTOM_PATH}
