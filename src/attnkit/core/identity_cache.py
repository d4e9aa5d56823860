"""A bounded, thread-safe LRU whose entries answer only for an equal snapshot of what they were built from.

The tile-map cache (:mod:`attnkit.core.tile_map`), the blockwise route caches
(:mod:`attnkit.backends.blockwise.kernel.segments_cache`, :mod:`attnkit.backends.blockwise.routes.custom`)
key their entries by a :class:`~attnkit.core.cache_keys.Snapshot` of the mask or predicate plus
the call's shape. The snapshot's key holds every constant the object reads; its tensors are compared
by content against the copies the entry froze when it was stored, so an entry answers only when a
fresh computation would give the same result: never for a rebound closure variable, a freed tensor
replaced at the same address, or data written through ``.data`` or NumPy.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Hashable

from .cache_keys import Snapshot, freeze, same

__all__ = ["SnapshotLRU"]


class SnapshotLRU:
    """``get(key, snap)`` / ``put(key, snap, value)`` with least-recently-used eviction past
    ``capacity()`` keys (a callable, so a module-level limit can be changed at run time), and
    hit / miss counts for :meth:`info`. ``key`` must contain ``snap.key``; under one key up to
    :data:`PER_KEY` contents are kept (two document masks of one shape used in turn both hit)."""

    PER_KEY = 4

    def __init__(self, capacity: Callable[[], int]):
        self._capacity = capacity
        self._lock = threading.Lock()
        self._data: OrderedDict[Hashable, list[tuple[tuple, object]]] = OrderedDict()  # key -> [(frozen tensors, value)]
        self._stats = {"hits": 0, "misses": 0}

    def get(self, key: Hashable, snap: Snapshot):
        """The value stored under ``key`` for the content the snapshot's tensors hold now, or None."""
        with self._lock:
            slots = list(self._data.get(key, ()))
        for frozen, value in slots:  # compared outside the lock: the frozen copies never change
            if same(frozen, snap):
                with self._lock:
                    if key in self._data:
                        self._data.move_to_end(key)
                    self._stats["hits"] += 1
                return value
        return None

    def put(self, key: Hashable, snap: Snapshot, value: object) -> None:
        """Store ``value`` with copies of the snapshot's tensors (counted as a miss: it was just
        computed) and evict the oldest entries."""
        frozen = freeze(snap)
        with self._lock:
            self._stats["misses"] += 1
            slots = [s for s in self._data.get(key, ()) if not same(s[0], snap)][-(self.PER_KEY - 1):]
            self._data[key] = [*slots, (frozen, value)]
            self._data.move_to_end(key)
            while len(self._data) > self._capacity():
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._stats.update(hits=0, misses=0)

    def info(self) -> dict[str, int]:
        """{"hits", "misses", "size"} since the last :meth:`clear` (size: keys kept)."""
        with self._lock:
            return {**self._stats, "size": len(self._data)}
