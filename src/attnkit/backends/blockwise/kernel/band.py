r"""Banded masks (sliding windows, causal windows) on the fused kernel, one call per chunk of blocks.

A sliding window ``[p - left, p + right]`` (query at key position ``p = i + off``, ``off`` from the
mask's alignment) lets a block of ``b`` queries starting at ``q0`` see only the keys
``[q0 + off - left, q0 + off + b - 1 + right]``: a window of ``w = b + left + right`` keys. For
every *interior* block (a full block whose window lies inside ``[0, S)``) the mask on that
(b, w) tile is the same band: row r may see columns ``r .. r + left + right``. So

* query blocks become a batch axis: q (H, L, E) viewed as (n, H, b, E), no copy;
* their key/value windows are overlapping strided views (n, Hkv, w, E) of k and v (window ``i``
  starts ``b`` keys after window ``i - 1``), no copy;
* heads and blocks go through one fused call with one shared (b, w) additive mask
  (0 / -inf), and the results are copied into a preallocated output, a chunk of blocks at a time,
  so the extra memory is one chunk (about 2 MiB), not a second output.

Every key in a block's window is seen by some query of the block, so a key no query of the block
may see never enters its call (no NaN leak from masked keys; a NaN in an allowed key reaches every
row of its block, as in the Python tile loop), except the alignment padding below, which is used
only when its keys are finite. The few *edge* blocks (windows clipped by the
sequence ends, the last short block) run one call each on the clipped key range with the mask
evaluated there; their rows with no allowed key get out 0 and lse -inf (:mod:`.merge`).

Work per useful pair: ``(b + left + right) / (left + right + 1)``; :func:`band_of` takes b = 64
(32 for windows under 128 keys), which keeps it near 1.25 for a 256-key window. The forward then
tunes the geometry for float32 and bf16 (:func:`tuned`), as the kernel's rate depends on the tile
shape (measured with one thread: benchmarks/results/bf16_window.json, bf16_window_kernel_w1024.json):

* a key count that is a multiple of 64 runs faster than one key less (319 → 320 keys: fp32
  1.1x, bf16 1.3x faster), so the window is padded on the right with up to 63 keys no query of
  the block may see (:func:`tuned`; masked by the shared mask, their weight is exactly 0) when
  those padding keys are finite, as a NaN there would reach the rows through ``NaN + -inf``
  (:func:`pad_keys_finite` sums only them, not all of k and v);
* bf16 gains from the kernel's packed bf16 GEMMs (AMX tiles) only on taller tiles: a bf16 tile
  takes 0.6x (256-key window) to 0.9x (1024 keys) the fp32 time at b = 64, 0.5x to 0.67x at
  b = 128 and about 0.45x at b = 256 (kernel alone); so on a CPU with AMX (:data:`PACKED_BF16`)
  bf16 windows of 256 keys or more take the tallest b in {128, 256} with b <= window / 4 (at most
  a quarter more pairs), and at least 128. Without AMX (an AMD EPYC with AVX-512 bf16 dot
  products) the kernel's bf16 tiles are no faster than its fp32 ones, and the taller blocks only
  add pairs: 53.1 ms against 49.1 on b = 64 (window 256, n = 4096,
  benchmarks/results/bf16_window_amd_epyc_amx_geometry.json), so bf16 keeps the fp32 geometry
  there (then 44.5 ms against float32's 43.1: bf16_window_amd_epyc.json). float32 keeps b = 64:
  on the route itself (overlapping windows of k and v) taller fp32 blocks were not faster.

The backward is :mod:`.band_grad` (PyTorch's private backward op is not used: fed the
global lse, its float32 weights miss a row sum of 1 by enough to show in dv).

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E head dim (Ev = E);
n blocks per chunk, b queries per block, w keys per window.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ....core import fresh_memory
from ....core.cost import HAS_AMX
from ....core.indices import alignment_offset
from .gate import forward_op
from .merge import empty_rows_to_neginf

__all__ = ["Band", "band_of", "tuned", "finite", "pad_keys_finite", "band_forward", "chunks", "CHUNK_ELEMS", "KEY_ALIGN"]

CHUNK_ELEMS = 1 << 19  # output elements per fused call (2 MiB in float32)


@dataclass(frozen=True)
class Band:
    """Geometry of a banded call: block size, window, interior block range [lo_block, hi_block)."""

    L: int
    S: int
    left: int
    right: int
    off: int  # key position of query 0
    b: int
    pad: int = 0  # keys after each interior window that no query of its block sees (kernel alignment)

    @property
    def w(self) -> int:
        return self.b + self.left + self.right + self.pad

    @property
    def nblocks(self) -> int:
        return -(-self.L // self.b)

    def start(self, i: int) -> int:
        """First key of block i's (unclipped) window."""
        return i * self.b + self.off - self.left

    @property
    def interior(self) -> tuple[int, int]:
        """Blocks [i0, i1) whose full window lies in [0, S) and that hold b queries."""
        b = self.b
        i0 = max(0, -(-(self.left - self.off) // b))
        i1 = min(self.L // b, (self.S - b - self.off - self.right - self.pad) // b + 1)
        return (i0, i1) if i1 > i0 else (0, 0)

    def edges(self) -> list[tuple[int, int, int, int]]:
        """(q0, q1, k0, k1) of every non-interior block with at least one key in range."""
        i0, i1 = self.interior
        out = []
        for i in list(range(0, i0)) + list(range(i1, self.nblocks)):
            q0, q1 = i * self.b, min((i + 1) * self.b, self.L)
            k0 = max(q0 + self.off - self.left, 0)
            k1 = min(q1 - 1 + self.off + self.right, self.S - 1) + 1
            if k1 > k0:
                out.append((q0, q1, k0, k1))
        return out


def band_of(mask, L: int, S: int) -> Band | None:
    """The band of a sliding-window mask with both sides bounded, else None."""
    left, right = getattr(mask, "left", None), getattr(mask, "right", None)
    if left is None or right is None or not mask.shift_invariant:
        return None
    b = 32 if left + right + 1 < 128 else 64
    return Band(L, S, left, right, alignment_offset(mask.align, L, S), min(b, L))


def finite(*ts: torch.Tensor) -> bool:
    """True when no tensor holds a NaN or inf: one sum each, in the tensor's own dtype (a bf16 sum
    is 7x faster than one accumulated into float32; NaN and inf survive a sum, and a finite sum that
    overflows only reads as not finite, which costs the fast path, never correctness)."""
    return all(bool(torch.isfinite(t.detach().sum())) for t in ts)


KEY_ALIGN = 64  # interior windows are padded to a multiple of this many keys when that is cheap
PACKED_BF16 = HAS_AMX  # the kernel's bf16 tiles run on AMX: taller bf16 blocks pay (module docstring)


def tuned(band: Band, dtype: torch.dtype, finite_kv: bool = True) -> Band:
    """The band's block size and padding for float32 and bf16 (see the module docstring; other
    dtypes keep ``band``, their rates were not measured). bf16 windows of 256 keys or more take the
    tallest block b in {128, 256} with b <= window / 4, at least 128, on a CPU with AMX
    (:data:`PACKED_BF16`; elsewhere the float32 geometry); with finite k and v
    (``finite_kv``), each interior window is padded to a multiple of :data:`KEY_ALIGN` keys when
    that adds at most an eighth of it."""
    if dtype not in (torch.float32, torch.bfloat16):
        return band
    b, window = band.b, band.left + band.right + 1
    if dtype == torch.bfloat16 and window >= 256 and PACKED_BF16:
        b = 256 if 256 <= window // 4 else 128
        b = min(b, band.L)
    pad = 0
    if finite_kv:
        w = b + band.left + band.right
        pad = -w % KEY_ALIGN
        pad = pad if pad <= w // 8 else 0
    return dataclasses.replace(band, b=b, pad=pad)


def _additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """bool (l, w) -> additive mask (l, w): 0 where allowed, -inf elsewhere (never a finite fill)."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(~allowed, float("-inf"))


def _blocks_view(x: torch.Tensor, bi: int, start: int, n: int, rows: int, step: int) -> torch.Tensor:
    """(n, heads, rows, D) view of x (B, heads, N, D): item j covers x[bi, :, start + j·step : + rows]."""
    sB, sH, sN, sD = x.stride()
    return x.as_strided((n, x.shape[1], rows, x.shape[3]), (step * sN, sH, sN, sD), x.storage_offset() + bi * sB + start * sN)


def _lse_view(lse: torch.Tensor, bi: int, start: int, n: int, rows: int) -> torch.Tensor:
    sB, sH, sN = lse.stride()
    return lse.as_strided((n, lse.shape[1], rows), (rows * sN, sH, sN), lse.storage_offset() + bi * sB + start * sN)


def chunks(band: Band, H: int, E: int, elems: int = CHUNK_ELEMS) -> list[tuple[int, int]]:
    """Interior blocks [c0, c1) per fused call: about ``elems`` output elements each."""
    i0, i1 = band.interior
    per = max(1, elems // (H * band.b * E))
    return [(i, min(i + per, i1)) for i in range(i0, i1, per)]


def _shared_mask(mask, band: Band, dtype, device) -> torch.Tensor:
    """The (b, w) additive mask of every interior block, evaluated from the mask itself."""
    i0 = band.interior[0]
    q0, k0 = i0 * band.b, band.start(i0)
    allowed = mask.evaluate((q0, q0 + band.b), (k0, k0 + band.w), band.L, band.S, device=device)
    return _additive(allowed[0, 0], dtype)


def pad_keys_finite(k: torch.Tensor, v: torch.Tensor, band: Band) -> bool:
    """True when the alignment padding keys of ``band``'s interior windows (the last ``band.pad``
    keys of each) hold no NaN or inf in k or v: only they can reach a row through ``NaN + -inf``
    (every other key of a window is one some query of its block sees, and such a key, if not
    finite, has sent the call to the reference's computation already). One sum over a strided view
    of (B, Hkv, blocks, pad, E) elements, not over all of k and v."""
    i0, i1 = band.interior
    if band.pad == 0 or i1 <= i0:
        return True
    first = band.start(i0) + band.w - band.pad
    views = []
    for t in (k, v):
        sB, sH, sN, sD = t.stride()
        views.append(t.as_strided((t.shape[0], t.shape[1], i1 - i0, band.pad, t.shape[3]),
                                  (sB, sH, band.b * sN, sN, sD), t.storage_offset() + first * sN))
    return finite(*views)


def band_forward(q, k, v, mask, band: Band, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """out (B, H, L, E) in q's dtype and lse (B, H, L) (float32; float64 for float64) of a banded call."""
    B, H, L, E = q.shape
    lse_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    out = fresh_memory.empty((B, H, L, v.shape[-1]), q.dtype, q.device)  # huge pages: fewer first-touch faults
    lse = torch.full((B, H, L), float("-inf"), dtype=lse_dtype, device=q.device)
    padded = tuned(band, q.dtype)
    band = padded if pad_keys_finite(k, v, padded) else tuned(band, q.dtype, False)
    op, b = forward_op(), band.b
    i0, i1 = band.interior  # interior rows are written once below; rows of no block keep 0
    out[:, :, :i0 * b].zero_()
    out[:, :, max(i0, i1) * b:].zero_()
    if i1 > i0:
        shared = _shared_mask(mask, band, q.dtype, q.device)
        for bi in range(B):
            for c0, c1 in chunks(band, H, E):
                n = c1 - c0
                qv = _blocks_view(q, bi, c0 * b, n, b, b)
                kv = _blocks_view(k, bi, band.start(c0), n, band.w, b)
                vv = _blocks_view(v, bi, band.start(c0), n, band.w, b)
                o, l2 = op(qv, kv, vv, attn_mask=shared, scale=scale)  # (n, H, b, E), (n, H, b)
                _blocks_view(out, bi, c0 * b, n, b, b).copy_(o)
                _lse_view(lse, bi, c0 * b, n, b).copy_(l2)
    for q0, q1, k0, k1 in band.edges():
        allowed = mask.evaluate((q0, q1), (k0, k1), L, band.S, device=q.device)[0, 0]  # (l, w)
        o, l2 = op(q[:, :, q0:q1], k[:, :, k0:k1], v[:, :, k0:k1], attn_mask=_additive(allowed, q.dtype), scale=scale)
        empty_rows_to_neginf(o, l2, allowed.any(-1))
        out[:, :, q0:q1] = o
        lse[:, :, q0:q1] = l2
    return out, lse


