r"""The additive masks of the fused tiles path's partly masked segments, computed once per shape.

The fused tiles path (:mod:`.tiles`) hands the kernel, for every segment holding a PARTIAL
tile, the mask on that segment as an additive 0 / -inf tensor. Evaluating a user predicate there,
turning it into a float tensor and finding its empty rows and dead keys costs about as much as the
kernel itself on a 256-key window; a model calls the same mask with the same shapes in every layer
and every step. So, like the mask's tile map (:mod:`attnkit.core.tile_map`), a segment's mask is
kept in a bounded LRU cache keyed by

* the mask: a built-in mask by its :attr:`~attnkit.core.masks.Mask.cache_key` (constants only); a
  custom predicate by its :func:`~attnkit.core.cache_keys.snapshot` (its code, closure cells,
  globals and bound object; every tensor among them compared by content against the entry's
  copies, so a rebound, edited or ``.data``-written capture misses); any other mask (a dense
  tensor, a captured-tensor built-in) and a predicate the snapshot cannot see through are
  evaluated every call, uncached;
* the call's L, S, batch rows (a predicate that reads ``b``), kv heads, dtype and device;
* the segment's query and key range.

Identical segment masks are stored once: along the diagonal of a window every interior segment
holds the same band, so an 8k sequence stores one (l, s) tensor, not 32. Entries are found by
content (a hash of the bool mask, confirmed by ``torch.equal``), never by assuming a predicate is
translation invariant: a document mask or a random predicate gets its own tensors where they
differ. The store is bounded in bytes (:data:`CACHE_BYTES`); least recently used entries go first.

Shape legend: B batch rows of the mask (1 when it does not read ``b``), Hkv key/value heads,
l queries of a block, s keys of a segment.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

import torch

from ....core.cache_keys import Snapshot, enabled, freeze, same, snapshot
from ....core.mask_values import CustomMask
from ....core.masks import values_readable
from ..loop.leaks import live_keys

__all__ = ["SegmentMask", "segment_masks", "segment_mask", "clear_cache", "cache_info", "CACHE_BYTES", "CACHE_ENTRIES"]

CACHE_BYTES = 64 << 20  # distinct segment masks kept (bytes of their tensors)
CACHE_ENTRIES = 1 << 14  # segment keys kept (each a small tuple pointing at a stored mask)


@dataclass(frozen=True, eq=False)
class SegmentMask:
    """One segment's mask as the kernel takes it.

    allowed: bool (B, 1, l, s); add: the additive mask in the call's dtype, (l, s) when B == 1
    else (B, 1, l, s), or None when every pair is allowed; rows: bool (B, 1, l), None when every
    row has an allowed key; live: bool (B, Hkv or 1, s, 1), None when every key is seen by some
    query; empty: no pair allowed (the segment contributes nothing)."""

    allowed: torch.Tensor
    add: torch.Tensor | None
    rows: torch.Tensor | None
    live: torch.Tensor | None
    empty: bool

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.allowed, self.add, self.rows, self.live) if t is not None)


_LOCK = threading.Lock()
_ENTRIES: OrderedDict[tuple, tuple[tuple, tuple]] = OrderedDict()  # key -> (the mask's frozen tensors, content key)
_STORE: dict[tuple, list] = {}  # content key -> [SegmentMask, number of entries using it]
_STATS = {"hits": 0, "misses": 0, "bytes": 0}


def segment_masks(mask, L: int, S: int, *, batch: int, kv_heads: int, dtype, device) -> Callable[[tuple, tuple], SegmentMask]:
    """A function ``(q_range, kv_range) -> SegmentMask`` for one call: the mask's key (and its
    snapshot) is read once here, the segments' masks come from the cache. Inference mode is part
    of every key: its tensors must never reach a call under autograd."""
    mkey, snap = _mask_key(mask)
    nb = batch if "b" in mask.dims else 1
    base = None if mkey is None else (mkey, L, S, nb, kv_heads, dtype, str(device), torch.is_inference_mode_enabled())

    frozen: list = []  # the snapshot's tensors copied once for all of this call's new entries

    def get(q_range: tuple[int, int], kv_range: tuple[int, int]) -> SegmentMask:
        return _cached(mask, base, snap, frozen, q_range, kv_range, L, S, nb, kv_heads, dtype, device)

    return get


def segment_mask(mask, q_range, kv_range, L: int, S: int, *, batch: int, kv_heads: int, dtype, device) -> SegmentMask:
    """The :class:`SegmentMask` of ``mask`` on queries ``q_range`` × keys ``kv_range``, cached."""
    return segment_masks(mask, L, S, batch=batch, kv_heads=kv_heads, dtype=dtype, device=device)(q_range, kv_range)


def _cached(mask, base, snap, frozen, q_range, kv_range, L, S, nb, kv_heads, dtype, device) -> SegmentMask:
    key = None if base is None else (*base, *q_range, *kv_range)
    if key is not None:
        with _LOCK:
            hit = _ENTRIES.get(key)
            if hit is not None and same(hit[0], snap):
                _ENTRIES.move_to_end(key)
                _STATS["hits"] += 1
                return _STORE[hit[1]][0]
    allowed = mask.evaluate(q_range, kv_range, L, S, batch=nb, heads=1, device=device)  # (nb, 1, l, s)
    if key is None or not values_readable(allowed):
        return _build(allowed, kv_heads, dtype)
    allowed = allowed.clone(memory_format=torch.contiguous_format)  # never a view of the predicate's own tensors
    ckey = (tuple(allowed.shape), _digest(allowed), kv_heads, dtype, str(device), torch.is_inference_mode_enabled())
    with _LOCK:
        _STATS["misses"] += 1
        stored = _STORE.get(ckey)
        if stored is not None and not torch.equal(stored[0].allowed, allowed):
            return _build(allowed, kv_heads, dtype)  # a hash collision: serve it uncached
    seg = stored[0] if stored is not None else _build(allowed, kv_heads, dtype)
    if seg.nbytes > CACHE_BYTES // 4:
        return seg
    with _LOCK:
        _drop(key)
        slot = _STORE.setdefault(ckey, [seg, 0])
        if slot[1] == 0:
            _STATS["bytes"] += seg.nbytes
        slot[1] += 1
        if not frozen:
            frozen.append(freeze(snap))
        _ENTRIES[key] = (frozen[0], ckey)
        while _ENTRIES and (_STATS["bytes"] > CACHE_BYTES or len(_ENTRIES) > CACHE_ENTRIES):
            _drop(next(iter(_ENTRIES)))
        return slot[0]


def clear_cache() -> None:
    """Forget every cached segment mask."""
    with _LOCK:
        _ENTRIES.clear()
        _STORE.clear()
        _STATS.update(hits=0, misses=0, bytes=0)


def cache_info() -> dict[str, int]:
    """{"hits", "misses", "entries", "distinct", "bytes"} of the segment-mask cache."""
    with _LOCK:
        return {"hits": _STATS["hits"], "misses": _STATS["misses"], "entries": len(_ENTRIES),
                "distinct": len(_STORE), "bytes": _STATS["bytes"]}


def _drop(key: tuple) -> None:
    """Remove one entry (lock held); its stored mask goes when no entry uses it any more."""
    old = _ENTRIES.pop(key, None)
    if old is None:
        return
    slot = _STORE[old[1]]
    slot[1] -= 1
    if slot[1] == 0:
        _STATS["bytes"] -= slot[0].nbytes
        del _STORE[old[1]]


def _build(allowed: torch.Tensor, kv_heads: int, dtype) -> SegmentMask:
    """The kernel's view of one evaluated segment mask (nb, 1, l, s)."""
    readable = values_readable(allowed)
    if readable and not bool(allowed.any()):
        return SegmentMask(allowed, None, None, None, True)
    if readable and bool(allowed.all()):
        return SegmentMask(allowed, None, None, None, False)
    add = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(~allowed, float("-inf"))
    if add.shape[0] == 1:
        add = add[0, 0]
    rows = allowed.any(-1)  # (nb, 1, l)
    if readable and bool(rows.all()):
        rows = None
    live = live_keys(allowed, kv_heads)  # (nb, 1, s, 1): the mask does not read h
    if readable and bool(live.all()):
        live = None
    return SegmentMask(allowed, add, rows, live, False)


def _digest(allowed: torch.Tensor) -> int:
    """A hash of a bool mask's content (equal contents are confirmed by ``torch.equal``)."""
    return hash(allowed.cpu().numpy().tobytes())


_NO_TENSORS = Snapshot((), ())


def _mask_key(mask) -> tuple[tuple | None, Snapshot]:
    """(hashable key of the mask or None when it cannot be cached, the snapshot whose tensors an
    entry compares by content)."""
    if not enabled():
        return None, _NO_TENSORS
    if type(mask) is CustomMask and not (mask.dims & {"h"}):
        snap = snapshot(mask.fn)
        return (None, _NO_TENSORS) if snap is None else (("custom", snap.key), snap)
    key = getattr(mask, "cache_key", None)
    if key is not None:
        return ("mask", key), _NO_TENSORS
    return None, _NO_TENSORS
