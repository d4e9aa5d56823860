r"""The fused tiles route's segments, computed once per (mask, L, S) and kept in a bounded cache.

:func:`..routes.planned` decides, for every blockwise call and for every estimate ``auto``
asks of blockwise, which fused route serves it; for masks other than causal and windows (documents,
padding, prefix-LM, custom predicates) that means reading the mask's tile states on the 256 × 256
grid and turning them into per-query-block segments (:func:`.tiles.segments_of`): at n = 64
that took 190 µs (padding) to 300 µs (document ids) on the 2-core CPU, more than SDPA's whole kernel
there, against 12 µs from this cache. A model asks the same question with the same mask and shapes
in every layer and step, so the answer is kept.

An entry is keyed by the mask and the call's L and S (the segments depend on nothing else: the tile
states cover every batch row and head):

* a mask with a :attr:`~attnkit.core.masks.Mask.cache_key` (constants only: causal, windows,
  chunks, prefix-LM with an int prefix) by that key;
* any other mask (documents, padding, dense bool tensors, custom predicates, combinations) by its
  :func:`~attnkit.core.cache_keys.snapshot`: every constant it and its parts hold (a window's
  ``right`` edited inside ``padding & window`` is a new key), a predicate's code, closure cells
  and globals, and the content of every tensor among them (compared against the entry's copies,
  so rebinding, ``.data`` and NumPy writes miss);
* masks the snapshot cannot see through are not cached (their values may depend on state no key
  can see).

At most :data:`CACHE_ENTRIES` entries are kept, least recently used dropped first; each holds a
tuple of ints of O(L/256 · S/256) and copies of the mask's tensors.
"""

from __future__ import annotations


from ....core.cache_keys import Snapshot, enabled, snapshot
from ....core.identity_cache import SnapshotLRU
from .tiles import Segments, segments_of

__all__ = ["cached_segments", "clear_cache", "cache_info", "CACHE_ENTRIES"]

CACHE_ENTRIES = 256  # (mask, L, S) entries kept

_CACHE = SnapshotLRU(lambda: CACHE_ENTRIES)  # key -> (the mask's frozen tensors, segments)



_NO_TENSORS = Snapshot((), ())


def mask_key(mask) -> tuple[tuple | None, Snapshot]:
    """(hashable key or None when ``mask`` may not be cached, the snapshot whose tensors an entry
    compares): a value key for constant masks, else the mask's snapshot."""
    if not enabled():
        return None, _NO_TENSORS
    key = mask.cache_key
    if key is not None:
        return ("key", key), _NO_TENSORS
    snap = snapshot(mask)
    if snap is None:
        return None, _NO_TENSORS
    return ("snapshot", snap.key), snap


def cached_segments(mask, L: int, S: int) -> Segments | None:
    """:func:`.tiles.segments_of` of ``mask`` for an (L, S) call, from the cache when an equal
    mask (same key, same tensor contents) was read for the same L and S."""
    mkey, snap = mask_key(mask)
    if mkey is None:
        return segments_of(mask, L, S)
    key = (mkey, L, S)
    hit = _CACHE.get(key, snap)
    if hit is not None:
        return hit
    segs = segments_of(mask, L, S)
    if segs is None:  # tile states unreadable here (meta, tracing): nothing to keep
        return None
    _CACHE.put(key, snap, segs)
    return segs


def clear_cache() -> None:
    """Forget every cached route segment."""
    _CACHE.clear()


def cache_info() -> dict[str, int]:
    """{"hits", "misses", "size"} of the route cache since the last :func:`clear_cache`."""
    return _CACHE.info()
