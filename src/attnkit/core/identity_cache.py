"""A bounded, thread-safe LRU whose entries belong to an owner object.

The tile-map cache (:mod:`attnkit.core.tile_map`) and the blockwise route cache
(:mod:`attnkit.backends.blockwise.route_cache`) key their entries partly by ``id(obj)``. An id can be
reused once its object is freed, so each entry also holds a weak reference (or a callable returning
the object) and answers only while that still returns the very object asked about.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Callable, Hashable


class IdentityLRU:
    """``get(key, owner)`` / ``put(key, ref, value)`` with least-recently-used eviction past
    ``capacity()`` entries (a callable, so a module-level limit can be changed at run time), and
    hit / miss counts for :meth:`info`."""

    def __init__(self, capacity: Callable[[], int]):
        self._capacity = capacity
        self._lock = threading.Lock()
        self._data: OrderedDict[Hashable, tuple[Callable[[], object], object]] = OrderedDict()
        self._stats = {"hits": 0, "misses": 0}

    def get(self, key: Hashable, owner: object):
        """The value stored under ``key`` for this very ``owner``, or None."""
        with self._lock:
            hit = self._data.get(key)
            if hit is not None and hit[0]() is owner:  # the same object, not a new one at a reused address
                self._data.move_to_end(key)
                self._stats["hits"] += 1
                return hit[1]
        return None

    def put(self, key: Hashable, ref: Callable[[], object], value: object) -> None:
        """Store ``value`` (counted as a miss: it was just computed) and evict the oldest entries."""
        with self._lock:
            self._stats["misses"] += 1
            self._data[key] = (ref, value)
            self._data.move_to_end(key)
            while len(self._data) > self._capacity():
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._stats.update(hits=0, misses=0)

    def info(self) -> dict[str, int]:
        """{"hits", "misses", "size"} since the last :meth:`clear`."""
        with self._lock:
            return {**self._stats, "size": len(self._data)}


def owner_ref(obj: object) -> Callable[[], object]:
    """What an entry holds of its owner: a weak reference where the object allows one (the cache
    keeps nothing alive), else a callable returning it (a strong reference)."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


def no_owner() -> None:
    """The owner of an entry keyed by value alone (no object to find again)."""
    return None
