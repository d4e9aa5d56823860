"""The Python tile loop as the last route: it serves every call (:mod:`..loop`), so ``ROUTES``
always ends in a route that applies.

The estimate: only the tiles the mask keeps are computed (:func:`attnkit.core.tiles.kept_fraction`
on the tile sizes the loop would use), partly masked tiles evaluate the mask, a relative-position
bias is evaluated once per tile diagonal rather than once per tile, every Python-level tile costs a
fixed overhead (why the loop loses below ~1k tokens), and memory is O(n): accumulators, the output
and a few tiles.

Shape legend: B batch, H heads, L queries, S keys, E/Ev head dims; bq × bk one tile.
"""

from __future__ import annotations

import math

from ....core import cost
from ....core.tiles import kept_fraction
from ...tiling import default_tiles
from ..loop.run import PATH_NAME, run_tile_loop
from .base import Route

__all__ = ["TileLoopRoute", "TILE_LOOP"]

_SOFTMAX_OPS = 0.0  # the online softmax's passes are inside the measured flops rate


class TileLoopRoute(Route):
    """Every call, with the default tiles; its autograd function is the loop's own
    (:class:`..loop.function.BlockwiseFunction`), so ``forward``/``backward`` are not used."""

    name = PATH_NAME

    def applies(self, call) -> bool:
        return True

    def plan(self, call):
        return ()  # the loop plans its tiles itself (..loop.plan)

    def run(self, call, plan, seed):
        return run_tile_loop(call, None, None, seed)

    def estimate(self, call) -> cost.Estimate:
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
        return {"time_s": time_s, "bytes": float(nbytes), "path": self.name}


TILE_LOOP = TileLoopRoute()
