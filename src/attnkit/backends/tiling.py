"""Tile maps: what a mask says about every (query-block, key-block) tile at once, and tile sizes.

The blockwise backend walks an ``nq × nk`` grid of tiles (``nq = ceil(L / block_q)``,
``nk = ceil(S / block_kv)``). Asking :meth:`Mask.tile_state` once per tile costs a Python call per
tile — 16k calls at n = 16k with 128-wide tiles, which is most of a window-attention forward. Here
the same analytic rules as the masks' ``_tile`` methods are evaluated for the whole grid with one
tensor expression per mask, giving an ``(nq, nk)`` int8 map with codes

* ``EMPTY`` (0) — no pair may attend: the tile is skipped,
* ``FULL`` (1) — every pair may attend: computed without evaluating the mask,
* ``PARTIAL`` (2) — some may: the mask is evaluated on the tile,
* ``UNKNOWN`` (3) — no analytic answer (custom predicates, non-contiguous documents): the backend
  evaluates the mask on the tile and learns there whether it is empty, full or partial.

The map is conservative: a tile is only called EMPTY or FULL when that is proved for every batch
row and head, so skipping never changes the result.

Shape legend: B batch, H heads, L queries, S keys.
"""

from __future__ import annotations

import math

import torch

from ..core.indices import alignment_offset
from ..core.masks import (
    AndMask,
    CausalMask,
    DocumentMask,
    KeyPaddingMask,
    KeyPrefixMask,
    Mask,
    NotMask,
    OrMask,
    SlidingWindowMask,
    TensorMask,
)

EMPTY, FULL, PARTIAL, UNKNOWN = 0, 1, 2, 3


def block_bounds(n: int, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Start and (exclusive) end of every block: two int64 tensors (ceil(n / block),)."""
    start = torch.arange(0, n, block, dtype=torch.int64)
    return start, torch.clamp(start + block, max=n)


def tile_map(mask: Mask | None, L: int, S: int, block_q: int, block_kv: int) -> torch.Tensor:
    """(nq, nk) int8 codes (EMPTY/FULL/PARTIAL/UNKNOWN) of ``mask`` on the tile grid."""
    nq, nk = math.ceil(L / block_q), math.ceil(S / block_kv)
    if mask is None:
        return torch.full((nq, nk), FULL, dtype=torch.int8)
    q0, q1 = block_bounds(L, block_q)
    k0, k1 = block_bounds(S, block_kv)
    return _map(mask, q0[:, None], q1[:, None] - 1, k0[None, :], k1[None, :] - 1, L, S, block_q, block_kv).to(torch.int8)


def _states(full: torch.Tensor, empty: torch.Tensor) -> torch.Tensor:
    return torch.where(empty, EMPTY, torch.where(full, FULL, PARTIAL)).to(torch.int8)


def _map(m: Mask, q0, qlast, k0, klast, L, S, bq, bk) -> torch.Tensor:
    """Codes for tiles whose first/last query are q0/qlast (nq, 1) and first/last key k0/klast (1, nk)."""
    shape = (q0.shape[0], k0.shape[1])
    if isinstance(m, CausalMask):
        off = alignment_offset(m.align, L, S)
        return _states(klast <= q0 + off, k0 > qlast + off).expand(shape)
    if isinstance(m, SlidingWindowMask):
        off = alignment_offset(m.align, L, S)
        p0, p1 = q0 + off, qlast + off
        lo = m.left if m.left is not None else L + S  # "unbounded" as a distance no tile can exceed
        hi = m.right if m.right is not None else L + S
        empty = (klast < p0 - lo) | (k0 > p1 + hi)
        full = (k0 >= p1 - lo) & (klast <= p0 + hi)
        return _states(full, empty).expand(shape)
    if isinstance(m, KeyPrefixMask):
        if isinstance(m.prefix, torch.Tensor):
            lo, hi = int(m.prefix.min()), int(m.prefix.max())
        else:
            lo = hi = m.prefix
        return _states(klast < lo, k0 >= hi).expand(shape)
    if isinstance(m, KeyPaddingMask):
        valid = m.valid.cpu()
        allv, anyv = _block_all_any(valid, S, bk)  # (B, nk)
        return _states(allv.all(0)[None, :], ~anyv.any(0)[None, :]).expand(shape)
    if isinstance(m, DocumentMask):
        return _document(m, L, S, bq, bk).expand(shape)
    if isinstance(m, TensorMask) and m.t.shape[2] == L and m.t.shape[3] == S:
        t = m.t.cpu().flatten(0, 1).any(0)  # (L, S): a tile is non-empty if any row/head may attend
        a = m.t.cpu().flatten(0, 1).all(0)
        rows_any = _block_reduce_2d(t, bq, bk, "any")
        rows_all = _block_reduce_2d(a, bq, bk, "all")
        return _states(rows_all, ~rows_any)
    if isinstance(m, AndMask):
        parts = [_map(p, q0, qlast, k0, klast, L, S, bq, bk) for p in m.parts]
        st = torch.stack([p.expand(shape) for p in parts])
        out = torch.full(shape, PARTIAL, dtype=torch.int8)
        out[(st == UNKNOWN).any(0)] = UNKNOWN
        out[(st == FULL).all(0)] = FULL
        out[(st == EMPTY).any(0)] = EMPTY
        return out
    if isinstance(m, OrMask):
        parts = [_map(p, q0, qlast, k0, klast, L, S, bq, bk) for p in m.parts]
        st = torch.stack([p.expand(shape) for p in parts])
        # two partial tiles may still cover the tile together: only evaluation can tell
        out = torch.full(shape, UNKNOWN, dtype=torch.int8)
        out[(st == EMPTY).all(0)] = EMPTY
        out[(st == FULL).any(0)] = FULL
        return out
    if isinstance(m, NotMask):
        inner = _map(m.inner, q0, qlast, k0, klast, L, S, bq, bk)
        out = inner.clone()
        out[inner == EMPTY] = FULL
        out[inner == FULL] = EMPTY
        return out
    return torch.full(shape, UNKNOWN, dtype=torch.int8)


def _block_all_any(x: torch.Tensor, n: int, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-block all/any over the last axis of a bool (R, n) tensor → two (R, ceil(n/block))."""
    nb = math.ceil(n / block)
    pad = nb * block - n
    xa = torch.nn.functional.pad(x, (0, pad), value=True).view(x.shape[0], nb, block)
    xn = torch.nn.functional.pad(x, (0, pad), value=False).view(x.shape[0], nb, block)
    return xa.all(-1), xn.any(-1)


def _block_reduce_2d(x: torch.Tensor, bq: int, bk: int, how: str) -> torch.Tensor:
    L, S = x.shape
    nq, nk = math.ceil(L / bq), math.ceil(S / bk)
    fill = how == "all"
    xp = torch.nn.functional.pad(x, (0, nk * bk - S, 0, nq * bq - L), value=fill).view(nq, bq, nk, bk)
    return xp.all(3).all(1) if fill else xp.any(3).any(1)


def _document(m: DocumentMask, L: int, S: int, bq: int, bk: int) -> torch.Tensor:
    """Per-block min/max of document ids: disjoint ranges prove a tile empty in every row; one
    shared id on both sides proves it full. Anything else is evaluated (ids may not be sorted)."""
    qi, ki = m.q_ids.cpu(), m.kv_ids.cpu()
    if qi.shape[1] != L or ki.shape[1] != S:
        raise ValueError(f"document ids cover L={qi.shape[1]}, S={ki.shape[1]} but the call has L={L}, S={S}")
    qmin, qmax = _block_min_max(qi, bq)  # (Bq, nq)
    kmin, kmax = _block_min_max(ki, bk)  # (Bk, nk)
    empty = ((qmax[:, :, None] < kmin[:, None, :]) | (kmax[:, None, :] < qmin[:, :, None])).all(0)
    full = ((qmin == qmax)[:, :, None] & (kmin == kmax)[:, None, :] & (qmin[:, :, None] == kmin[:, None, :])).all(0)
    out = torch.full(empty.shape, UNKNOWN, dtype=torch.int8)
    out[full] = FULL
    out[empty] = EMPTY
    return out


def _block_min_max(ids: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    R, n = ids.shape
    nb = math.ceil(n / block)
    pad = nb * block - n
    big = torch.iinfo(ids.dtype).max
    small = torch.iinfo(ids.dtype).min
    mn = torch.nn.functional.pad(ids, (0, pad), value=big).view(R, nb, block).amin(-1)
    mx = torch.nn.functional.pad(ids, (0, pad), value=small).view(R, nb, block).amax(-1)
    return mn, mx


_KEPT_CACHE: dict[tuple, tuple[float, float]] = {}


def kept_fraction(mask: Mask | None, L: int, S: int, block_q: int, block_kv: int) -> tuple[float, float]:
    """(fraction of tiles not skipped, fraction of tiles needing mask evaluation), by tile area.

    Cached for causal and window masks (their repr holds every parameter), so ``auto`` dispatch
    costs microseconds on the calls where SDPA's kernel takes only a few milliseconds."""
    if mask is None:
        return 1.0, 0.0
    key = None
    if type(mask) in (CausalMask, SlidingWindowMask):
        key = (repr(mask), L, S, block_q, block_kv)
        if key in _KEPT_CACHE:
            return _KEPT_CACHE[key]
    result = _kept_fraction(mask, L, S, block_q, block_kv)
    if key is not None:
        if len(_KEPT_CACHE) > 4096:
            _KEPT_CACHE.clear()
        _KEPT_CACHE[key] = result
    return result


def _kept_fraction(mask: Mask, L: int, S: int, block_q: int, block_kv: int) -> tuple[float, float]:
    codes = tile_map(mask, L, S, block_q, block_kv)
    q0, q1 = block_bounds(L, block_q)
    k0, k1 = block_bounds(S, block_kv)
    area = (q1 - q0).double()[:, None] * (k1 - k0).double()[None, :]
    total = float(L) * float(S)
    kept = float(area[codes != EMPTY].sum()) / total
    evaluated = float(area[(codes == PARTIAL) | (codes == UNKNOWN)].sum()) / total
    return kept, evaluated


# tile sizes ------------------------------------------------------------------------------------
_OVERRIDE: dict[str, int | None] = {"block_q": None, "block_kv": None}


def set_tile_sizes(block_q: int | None = None, block_kv: int | None = None) -> None:
    """Override the blockwise backend's tile sizes globally (None restores the per-call default)."""
    for name, v in (("block_q", block_q), ("block_kv", block_kv)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
            raise ValueError(f"{name} must be a positive int or None (automatic), got {v!r}")
    _OVERRIDE["block_q"], _OVERRIDE["block_kv"] = block_q, block_kv


def banded_width(mask: Mask | None) -> int | None:
    """Total width of a sliding window (left + right + 1), if the mask is one (possibly and-ed)."""
    if isinstance(mask, SlidingWindowMask) and mask.left is not None and mask.right is not None:
        return mask.left + mask.right + 1
    if isinstance(mask, AndMask):
        widths = [w for w in (banded_width(p) for p in mask.parts) if w is not None]
        return min(widths) if widths else None
    return None


def default_tiles(mask: Mask | None, L: int, S: int, dtype: torch.dtype, device: torch.device) -> tuple[int, int]:
    """Tile sizes measured best on the 2-core CPU (../shared/PERF-NOTES.md): 256 × 512 for dense and
    causal work (fewer Python iterations, GEMMs still in cache), 128 × 128 for narrow windows (less
    work wasted on the partly masked tiles along the band). Other devices get the dense choice."""
    w = banded_width(mask)
    if w is not None and w <= 1024:
        bq, bk = 128, 128
    else:
        bq, bk = 256, 512
    bq = _OVERRIDE["block_q"] or bq
    bk = _OVERRIDE["block_kv"] or bk
    return min(bq, L), min(bk, S)
