r"""The fused tiles route's segments, computed once per (mask, L, S) and kept in a bounded cache.

:func:`.fused_function.route_of` decides, for every blockwise call and for every estimate ``auto``
asks of blockwise, which fused route serves it; for masks other than causal and windows (documents,
padding, prefix-LM, custom predicates) that means reading the mask's tile states on the 256 × 256
grid and turning them into per-query-block segments (:func:`.fused_tiles.segments_of`): at n = 64
that took 190 µs (padding) to 300 µs (document ids) on the 2-core CPU, more than SDPA's whole kernel
there, against 12 µs from this cache. A model asks the same question with the same mask and shapes
in every layer and step, so the answer is kept.

An entry is keyed by the mask and the call's L and S (the segments depend on nothing else: the tile
states cover every batch row and head):

* a mask with a :attr:`~attnkit.core.masks.Mask.cache_key` (constants only: causal, windows,
  chunks, prefix-LM with an int prefix) by that key;
* a custom predicate (:class:`~attnkit.core.mask_values.CustomMask`) by its function's identity,
  the indices it reads, its device and the ``(id, _version)`` of every tensor its closure captures;
* any other built-in mask (documents, padding, dense bool tensors, combinations of them) by its
  identity and the ``(id, _version)`` of every tensor it holds, its parts' included
  (:func:`attnkit.backends.sdpa_mask_cache._mask_tensors`), so an in-place edit of ``doc_ids``
  or of the padding lengths' mask is a new key;
* masks defined outside attnkit, and combinations holding a custom predicate, are not cached
  (their values may depend on state no key can see).

Identity-keyed entries hold a weak reference to the object they were computed for and are used only
while it is that object, so a new mask at a recycled address misses. At most :data:`CACHE_ENTRIES`
entries are kept, least recently used dropped first; each holds a tuple of ints of O(L/256 · S/256).
"""

from __future__ import annotations


from ...core.identity_cache import IdentityLRU, no_owner, owner_ref
from ...core.mask_values import CustomMask
from ...core.tile_map import captured_versions
from ..sdpa_mask_cache import _mask_tensors
from .fused_tiles import Segments, segments_of

__all__ = ["cached_segments", "clear_cache", "cache_info", "CACHE_ENTRIES"]

CACHE_ENTRIES = 256  # (mask, L, S) entries kept

_CACHE = IdentityLRU(lambda: CACHE_ENTRIES)  # key -> (identity check, segments)



def mask_key(mask) -> tuple[tuple | None, object, object]:
    """(hashable key or None when ``mask`` may not be cached, the object the entry must still find,
    a function returning it now: a weak reference, or one returning None for value-keyed masks)."""
    key = mask.cache_key
    if key is not None:
        return ("key", key), None, no_owner
    if type(mask) is CustomMask:
        fn = mask.fn
        versions = captured_versions(fn)
        # its tile states also depend on the indices it reads (all PARTIAL when it reads b) and its device
        return ("custom", id(fn), tuple(sorted(mask.dims)), str(mask.device), versions), fn, owner_ref(fn)
    tensors = _mask_tensors(mask)
    if tensors is None:
        return None, None, no_owner
    return ("object", id(mask), tuple((id(t), t._version) for t in tensors)), mask, owner_ref(mask)


def cached_segments(mask, L: int, S: int) -> Segments | None:
    """:func:`.fused_tiles.segments_of` of ``mask`` for an (L, S) call, from the cache when the same
    mask (same key, or the same unchanged object) was read for the same L and S."""
    mkey, owner, ref = mask_key(mask)
    if mkey is None:
        return segments_of(mask, L, S)
    key = (mkey, L, S)
    hit = _CACHE.get(key, owner)
    if hit is not None:
        return hit
    segs = segments_of(mask, L, S)
    if segs is None:  # tile states unreadable here (meta, tracing): nothing to keep
        return None
    _CACHE.put(key, ref, segs)
    return segs


def clear_cache() -> None:
    """Forget every cached route segment."""
    _CACHE.clear()


def cache_info() -> dict[str, int]:
    """{"hits", "misses", "size"} of the route cache since the last :func:`clear_cache`."""
    return _CACHE.info()
