"""SnapshotLRU: answers only while the snapshot's tensors hold the stored content, evicts the least
recently used, counts."""

from __future__ import annotations

import torch

from attnkit.core.cache_keys import snapshot
from attnkit.core.identity_cache import SnapshotLRU


def test_an_entry_answers_only_equal_content_and_the_oldest_goes_first():
    limit = [2]
    cache = SnapshotLRU(lambda: limit[0])
    a, b, c = torch.tensor([1, 2]), torch.tensor([3, 4]), torch.tensor([5, 6])
    sa, sb, sc = snapshot(a), snapshot(b), snapshot(c)
    assert sa.key == sb.key  # same shape and dtype: only the content tells them apart
    cache.put(("a", sa.key), sa, 1)
    cache.put(("b", sb.key), sb, 2)
    assert cache.get(("a", sa.key), sa) == 1 and cache.get(("a", sa.key), sb) is None  # other content: a miss
    cache.put(("c", sc.key), sc, 3)  # "b" is now the least recently used
    assert cache.get(("b", sb.key), sb) is None and cache.get(("a", sa.key), sa) == 1 and cache.get(("c", sc.key), sc) == 3
    assert cache.info() == {"hits": 3, "misses": 3, "size": 2}
    limit[0] = 1
    cache.put("d", sa, 4)
    assert cache.info()["size"] == 1 and cache.get("d", sa) == 4
    cache.clear()
    assert cache.info() == {"hits": 0, "misses": 0, "size": 0}


def test_an_edit_of_the_stored_object_no_longer_answers():
    cache = SnapshotLRU(lambda: 8)
    t = torch.zeros(4, dtype=torch.long)
    snap = snapshot(t)
    cache.put(snap.key, snap, "v")
    t.data[1] = 7  # a write that leaves _version alone
    assert cache.get(snap.key, snapshot(t)) is None
    t.data[1] = 0
    assert cache.get(snap.key, snapshot(t)) == "v"
