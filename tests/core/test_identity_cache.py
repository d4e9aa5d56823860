"""IdentityLRU: answers only for the very owner object, evicts the least recently used, counts."""

from __future__ import annotations

import weakref

from attnkit.core.identity_cache import IdentityLRU


class Owner:
    pass


def test_an_entry_answers_only_its_own_object_and_the_oldest_goes_first():
    limit = [2]
    cache = IdentityLRU(lambda: limit[0])
    a, b, c = Owner(), Owner(), Owner()
    cache.put("a", weakref.ref(a), 1)
    cache.put("b", weakref.ref(b), 2)
    assert cache.get("a", a) == 1 and cache.get("a", b) is None  # same key, another object: a miss
    cache.put("c", weakref.ref(c), 3)  # "b" is now the least recently used
    assert cache.get("b", b) is None and cache.get("a", a) == 1 and cache.get("c", c) == 3
    assert cache.info() == {"hits": 3, "misses": 3, "size": 2}
    limit[0] = 1
    cache.put("d", weakref.ref(a), 4)
    assert cache.info()["size"] == 1 and cache.get("d", a) == 4
    cache.clear()
    assert cache.info() == {"hits": 0, "misses": 0, "size": 0}


def test_a_freed_owner_no_longer_answers():
    cache = IdentityLRU(lambda: 8)
    a = Owner()
    cache.put("k", weakref.ref(a), "v")
    del a
    assert cache.get("k", Owner()) is None
