r"""Gradients of a tiles-route call (documents, chunks, prefix-LM, ...) from complete rows.

The tiles route (:mod:`.tiles`) runs each block of queries (``BLOCK`` or ``FINE_BLOCK`` of
them) against its *segments*, runs of key tiles the mask leaves non-empty. The keys of all of a block's segments lie in one
*span* ``[first segment's start, last segment's end)``; for the masks this route serves the span
is mostly allowed pairs (a document's keys, a chunk, a prefix), so the backward can run every
row of the block against its whole span in one go, with the mask evaluated on it, and rebuild
each row's weights in full from its own score GEMM: :func:`.band_grad.rows_backward`, the
band route's edge-block backward (five GEMMs per block, all batch rows and heads in one ``bmm``,
weights renormalised to sum to 1 exactly, the forward's lse only the shift).

That replaces the tile loop's backward fed the kernel's lse (:mod:`.lse_grads`: one more score
GEMM per tile for the row sums, and Python per 128-key tile). Measured on this machine (one thread,
B=1, H=8, E=64, fp32, n = 8k, interleaved in one process: benchmarks/results/tiles_backward.json):
eight documents 663 -> 493 ms, chunks of 1024 keys 460 -> 367 ms. A prefix-LM, whose late blocks
span all 8k keys and so would run in sub-blocks of 64 rows, was no faster that way in a trial run,
and keeps the tile loop's backward (:data:`MIN_ROWS`; its row in that JSON is that path).

Used when it pays and is safe, else the caller keeps the tile loop's backward (None returned):

* the span holds at most :data:`MAX_WASTE` times the pairs of the block's segments (a mask with
  wide empty gaps inside a block would compute them all);
* k and v are finite: a key of the span that no query of the block may see could hold a NaN
  (padding, an unused cache slot), which ``0 · NaN`` would spread in the weights' GEMMs; the
  fused routes send a NaN some query sees to the reference's computation already, so this only
  sends the rare call with a NaN in an unseen key back to the tile loop, which zeroes such keys;
* work tensors stay bounded: rows of a block run in sub-blocks of at most :data:`ROWS_ELEMS`
  weights (B·H rows x span keys), at least :data:`MIN_ROWS` rows each.

Shape legend: B batch, H query heads, Hkv key/value heads (g = H / Hkv), L queries, S keys,
E head dim; N = B·H items, l rows of a sub-block, s keys of its span.
"""

from __future__ import annotations

import torch

from ....core import fresh_memory
from .band import finite
from .band_grad import Buffers, neg_shift, rows_backward
from .tiles import MAX_WASTE, Segments

__all__ = ["span_grads", "MAX_WASTE", "ROWS_ELEMS", "MIN_ROWS"]

ROWS_ELEMS = 1 << 22  # weights per sub-block (16 MiB in float32; two such work tensors)
MIN_ROWS = 128  # fewer rows per GEMM than this and the tile loop's backward is as fast (a prefix-LM at 8k: 64 rows)


def span_grads(dout, q, k, v, lse, dlse, mask, segs: Segments, scale: float, need):
    """(dq, dk, dv) in the inputs' dtypes (None where ``need`` is False), or None when this path
    does not serve the call (see the module docstring). dout (B, H, L, E) or None, lse (B, H, L)
    the forward's (natural units), dlse (B, H, L) or None."""
    B, H, L, E = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    g = H // Hkv
    spans = segs.spans()
    if spans is None or not finite(k, v):
        return None
    widest = max((k1 - k0 for *_, k0, k1 in spans), default=1)
    rows = ROWS_ELEMS // (B * H * widest)  # query rows per sub-block
    if rows < MIN_ROWS:
        return None
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    dout = torch.zeros(q.shape, dtype=q.dtype, device=q.device) if dout is None else dout
    nshift = neg_shift(lse.to(work))  # -lse, 0 for rows with no allowed key
    dq, dk, dv = (fresh_memory.empty(t.shape, work, t.device).zero_() if n else None for t, n in zip((q, k, v), need))
    bufs = Buffers(work, q.device)  # work tensors grown on demand, reused by every sub-block
    for q0, q1, k0, k1 in spans:
        s = k1 - k0
        kc, vc = (_per_query_head(t[:, :, k0:k1].to(work), g) for t in (k, v))  # (N, s, E)
        for r0 in range(q0, q1, rows):
            r1 = min(r0 + rows, q1)
            l = r1 - r0
            allowed = mask.evaluate((r0, r1), (k0, k1), L, S, batch=B, device=q.device)  # (B|1, 1, l, s)
            drop = None if bool(allowed.all()) else [(0, _per_item(~allowed, B, H))]
            qc, oc = (t[:, :, r0:r1].to(work).reshape(B * H, l, E) for t in (q, dout))
            nlc = nshift[:, :, r0:r1].reshape(B * H, l, 1)
            dlc = None if dlse is None else dlse[:, :, r0:r1].to(work).reshape(B * H, l, 1)
            gq, gk, gv = rows_backward(qc, kc, vc, oc, nlc, dlc, drop, scale, need, bufs.shaped(B * H, l, s, E))
            if gq is not None:
                dq[:, :, r0:r1] = gq.view(B, H, l, E)
            for acc, part in ((dk, gk), (dv, gv)):
                if part is not None:  # the g query heads of a kv head summed
                    acc[:, :, k0:k1] += part.view(B, Hkv, s, E) if g == 1 else part.view(B, Hkv, g, s, E).sum(2)
    return [None if t is None else t.to(x.dtype) for t, x in zip((dq, dk, dv), (q, k, v))]


def _per_query_head(x: torch.Tensor, g: int) -> torch.Tensor:
    """(B, Hkv, s, E) -> (B·H, s, E), each kv head repeated for its g query heads: a view when
    g == 1 (B and head strides merge), a copy otherwise."""
    B, Hkv, s, E = x.shape
    if g == 1:
        return x.reshape(B * Hkv, s, E)
    return x.unsqueeze(2).expand(B, Hkv, g, s, E).reshape(B * Hkv * g, s, E)


def _per_item(drop: torch.Tensor, B: int, H: int) -> torch.Tensor:
    """A (B|1, 1, l, s) bool mask as :func:`.band_grad.rows_backward` takes it: (l, s) when it
    is the same for every item (broadcast, no copy), else (B·H, l, s)."""
    if drop.shape[0] == 1:
        return drop[0, 0]
    return drop.expand(B, H, *drop.shape[2:]).reshape(B * H, *drop.shape[2:])
