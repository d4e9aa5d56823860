r"""Any other mask on the fused kernel, by tile states: document, chunked, prefix-LM, padding, ...

The mask says for every (query block, key block) tile of a grid whether it is EMPTY, FULL or
PARTIAL (:meth:`attnkit.core.masks.Mask.tile_states`, :mod:`attnkit.core.tiles`). For each block of
``BLOCK`` queries, the runs of consecutive non-empty key tiles become *segments*:

* a segment of FULL tiles runs in one fused call without a mask;
* a segment holding a PARTIAL tile has the mask evaluated on it (O(block × segment) bools, never
  (L, S)) and handed to the kernel as an additive 0 / -inf mask, shaped (B or 1, 1, l, s) for
  masks that depend on the batch row; these masks are computed once per shape and cached, equal
  ones stored once (:mod:`.segment_masks`), so the layers and steps of a model reuse them;
* a key of a masked segment that no query of the block may see (any batch row) is replaced by 0
  before the call when k or v holds a NaN or inf (:mod:`.leaks`: it would reach the other rows
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

from ...core.masks import values_readable
from ...core.tiles import EMPTY, FULL, TileGrid
from .fused_band import finite
from .fused_gate import backward_op, forward_op
from .fused_merge import empty_rows_to_neginf, lse_for_backward, merge_into
from .segment_masks import segment_masks

__all__ = ["BLOCK", "Segments", "segments_of", "tiles_forward", "tiles_backward"]

BLOCK = 256  # queries per block and keys per tile of the grid the mask classifies


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


def segments_of(mask, L: int, S: int) -> Segments | None:
    """The segments of ``mask`` on the (BLOCK × BLOCK) grid, or None when its tile states cannot be
    read (meta tensors, tracing)."""
    grid = TileGrid.uniform(L, S, BLOCK, BLOCK)
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
