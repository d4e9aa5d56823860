r"""Any other mask on the fused kernel, by tile states: document, chunked, per-row prefixes, padding, ...

The mask says for every (query block, key block) tile of a grid whether it is EMPTY, FULL or
PARTIAL (:meth:`attnkit.core.masks.Mask.tile_states`, :mod:`attnkit.core.tiles`). The grid's tiles
are ``BLOCK`` (256) wide, or ``FINE_BLOCK`` (128) where the mask's structure is finer and that grid
computes clearly fewer pairs (:func:`segments_of`). For each block of queries, the runs of
consecutive non-empty key tiles become *segments*:

* a segment of FULL tiles runs in one fused call without a mask;
* a segment holding a PARTIAL tile has the mask evaluated on it (O(block × segment) bools, never
  (L, S)) and handed to the kernel as an additive 0 / -inf mask, shaped (B or 1, 1, l, s) for
  masks that depend on the batch row; these masks are computed once per shape and cached, equal
  ones stored once (:mod:`.segment_masks`), so the layers and steps of a model reuse them;
* a key of a masked segment that no query of the block may see (any batch row) is replaced by 0
  before the call when k or v holds a NaN or inf (:mod:`..loop.leaks`: it would reach the other rows
  through ``NaN + -inf`` and ``0 · NaN``; a finite dead key's weight is exactly 0, so finite
  inputs skip the select); rows of a segment with no allowed key are (0, -inf) there.

The segments of one query block are merged by log-sum-exp into a float32 accumulator (float64 for
float64), then written once into the preallocated output. The backward feeds each segment's call
the block's *global* out and lse; dq, dk and dv are summed in float32 (float64), and the gradients
of keys replaced by 0 are 0.

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E head dim (Ev = E);
l queries of a block, s keys of a segment.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ....core.masks import values_readable
from ....core.tiles import EMPTY, FULL, TileGrid
from .band import finite
from .gate import backward_op, forward_op
from .merge import empty_rows_to_neginf, lse_for_backward, merge_into
from .segment_masks import segment_masks

__all__ = ["BLOCK", "FINE_BLOCK", "MAX_WASTE", "Segments", "segments_of", "tiles_forward", "tiles_backward"]

BLOCK = 256  # queries per block and keys per tile of the grid the mask classifies
FINE_BLOCK = 128  # the finer grid, taken where it computes clearly fewer pairs (see segments_of)
FINE_GAIN = 0.85  # ... at most this share of the coarse grid's weighted pairs
PARTIAL_WEIGHT = 1.15  # a pair of a masked segment against one of a FULL segment (mask built and added)
MAX_WASTE = 1.5  # span pairs / segment pairs of a block, above which the backward takes the tile loop's


@dataclass(frozen=True)
class Segments:
    """Per query block [q0, q1): its segments (k0, k1, full) of consecutive non-empty key tiles."""

    blocks: tuple[tuple[int, int, tuple[tuple[int, int, bool], ...]], ...]

    @property
    def calls(self) -> int:
        return sum(len(s) for _, _, s in self.blocks)

    @property
    def pairs(self) -> int:
        """Query-key pairs the kernel computes (per batch row and head)."""
        return sum((q1 - q0) * (k1 - k0) for q0, q1, segs in self.blocks for k0, k1, _ in segs)

    def spans(self) -> list[tuple[int, int, int, int]] | None:
        """(q0, q1, k0, k1) per query block with a segment, [k0, k1) from its first segment's start
        to its last one's end (:mod:`.tiles_grad` runs the backward on it), or None when a
        block's span holds more than :data:`MAX_WASTE` times its segments' keys."""
        out = []
        for q0, q1, seg_list in self.blocks:
            if not seg_list:
                continue
            k0, k1 = seg_list[0][0], seg_list[-1][1]
            if (k1 - k0) > MAX_WASTE * sum(b - a for a, b, _ in seg_list):
                return None
            out.append((q0, q1, k0, k1))
        return out


def segments_of(mask, L: int, S: int) -> Segments | None:
    """The segments of ``mask`` on the (BLOCK × BLOCK) grid, or on the (FINE_BLOCK × FINE_BLOCK)
    grid where that computes at most FINE_GAIN of the pairs (a PARTIAL pair weighing PARTIAL_WEIGHT)
    and keeps the backward on spans when the coarse grid does (:meth:`Segments.spans`: a finer
    grid can split a block's keys with empty tiles); None when its tile states cannot be read
    (meta tensors, tracing).

    The finer grid pays where the mask's structure is finer than 256 keys: four documents of 128
    keys at n = 512 ran in 2.2 ms instead of 4.4 (B = 1; 21 vs 36 ms at B = 8), a prefix-LM with a
    128-key prefix 4.3 vs 4.6. Elsewhere it only adds calls on shorter blocks, which the kernel runs
    more slowly: documents of 1,024 keys at n = 16k took 383 ms on it against 351, key padding
    6.1 vs 5.7 ms at n = 512 (one thread, H = 8, E = 64, float32)."""
    coarse = _segments_on(mask, L, S, BLOCK)
    if coarse is None or max(L, S) <= FINE_BLOCK:
        return coarse
    fine = _segments_on(mask, L, S, FINE_BLOCK)
    if fine is None or _weighted(fine) > FINE_GAIN * _weighted(coarse):
        return coarse
    return coarse if fine.spans() is None and coarse.spans() is not None else fine


def _weighted(segs: Segments) -> float:
    """The pairs a route computes, a masked segment's weighing PARTIAL_WEIGHT."""
    return sum((q1 - q0) * (k1 - k0) * (1.0 if full else PARTIAL_WEIGHT)
               for q0, q1, ss in segs.blocks for k0, k1, full in ss)


def _segments_on(mask, L: int, S: int, block: int) -> Segments | None:
    """The segments of ``mask`` on the (block × block) grid, or None when its tile states cannot be read."""
    grid = TileGrid.uniform(L, S, block, block)
    codes = mask.tile_states(grid).expand(grid.shape)
    if not values_readable(codes):
        return None
    rows = codes.tolist()
    k_start, k_end = grid.k_start.tolist(), grid.k_end.tolist()
    blocks = []
    for qi, (q0, q1) in enumerate(zip(grid.q_start.tolist(), grid.q_end.tolist())):
        segs, run = [], None  # run: [first tile, last tile, all full]
        for ki, code in enumerate(rows[qi] + [EMPTY]):
            if code != EMPTY and run is not None:
                run[1], run[2] = ki, run[2] and code == FULL
            elif code != EMPTY:
                run = [ki, ki, code == FULL]
            elif run is not None:
                segs.append((k_start[run[0]], k_end[run[1]], run[2]))
                run = None
        blocks.append((q0, q1, tuple(segs)))
    return Segments(tuple(blocks))


def _segment(masks, q, k, v, q0, q1, k0, k1, full, zero_dead: bool = True):
    """(k, v of the segment, its :class:`~.segment_masks.SegmentMask` or None for a FULL segment).
    With ``zero_dead`` the keys no query of the block may see are replaced by 0 (a select, not a
    product: a NaN there goes too); callers whose k and v are finite may skip it, as a finite dead
    key's weight is exactly 0."""
    ks, vs = k[:, :, k0:k1], v[:, :, k0:k1]
    if full:
        return ks, vs, None
    seg = masks((q0, q1), (k0, k1))
    if zero_dead and seg.live is not None:
        ks, vs = torch.where(seg.live, ks, 0.0), torch.where(seg.live, vs, 0.0)
    return ks, vs, seg


def tiles_forward(q, k, v, mask, segs: Segments, scale: float):
    """out (B, H, L, E) in q's dtype and lse (B, H, L) (float32; float64 for float64)."""
    B, H, L, E = q.shape
    S = k.shape[2]
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    out = torch.zeros(B, H, L, v.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.full((B, H, L), float("-inf"), dtype=work, device=q.device)
    op = forward_op()
    masks = segment_masks(mask, L, S, batch=B, kv_heads=k.shape[1], dtype=q.dtype, device=q.device)
    zero_dead = not finite(k, v)  # two O(n) sums instead of a select per segment
    for q0, q1, seg_list in segs.blocks:
        qt = q[:, :, q0:q1]
        acc, acc_lse = None, lse[:, :, q0:q1]
        for k0, k1, full in seg_list:
            ks, vs, seg = _segment(masks, q, k, v, q0, q1, k0, k1, full, zero_dead)
            if seg is not None and seg.empty:
                continue
            o, l2 = op(qt, ks, vs, attn_mask=None if seg is None else seg.add, scale=scale)
            if seg is not None and seg.rows is not None:
                empty_rows_to_neginf(o, l2, seg.rows.expand(B, H, q1 - q0))
            if acc is None:
                acc = o.to(work)
                acc_lse.copy_(l2)
            else:
                merge_into(acc, acc_lse, o, l2)
        if acc is not None:
            out[:, :, q0:q1] = acc
    return out, lse


def tiles_backward(dout, q, k, v, out, lse, mask, segs: Segments, scale: float):
    """(dq, dk, dv) from the global out and lse, summed in float32 (float64 for float64)."""
    B, H, L, E = q.shape
    S = k.shape[2]
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    dq = torch.zeros(q.shape, dtype=work, device=q.device)
    dk = torch.zeros(k.shape, dtype=work, device=k.device)
    dv = torch.zeros(v.shape, dtype=work, device=v.device)
    bop = backward_op()
    lse_b = lse_for_backward(lse)
    masks = segment_masks(mask, L, S, batch=B, kv_heads=k.shape[1], dtype=q.dtype, device=q.device)
    for q0, q1, seg_list in segs.blocks:
        r = slice(q0, q1)
        for k0, k1, full in seg_list:
            ks, vs, seg = _segment(masks, q, k, v, q0, q1, k0, k1, full)
            if seg is not None and seg.empty:
                continue
            add, live = (None, None) if seg is None else (seg.add, seg.live)
            g = bop(dout[:, :, r], q[:, :, r], ks, vs, out[:, :, r], lse_b[:, :, r], 0.0, False, attn_mask=add, scale=scale)
            dq[:, :, r] += g[0]
            gk, gv = (g[1], g[2]) if live is None else (torch.where(live, g[1], 0.0), torch.where(live, g[2], 0.0))
            dk[:, :, k0:k1] += gk
            dv[:, :, k0:k1] += gv
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)
