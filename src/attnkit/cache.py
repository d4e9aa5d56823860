"""The KV caches for incremental decoding, under their short public name: ``from attnkit import cache``
(``cache.DynamicCache()``) or ``from attnkit.cache import StaticCache``.

The caches live in :mod:`attnkit.modules.cache` (with :mod:`~attnkit.modules.cache_base`,
:mod:`~attnkit.modules.cache_kinds` and :mod:`~attnkit.modules.cache_positions`), which explains how
they work; this module only re-exports its public names. A new cache is added there, to its
``__all__``, and here (``tests/decoding/test_cache_module.py`` checks that the two lists agree).
"""

from __future__ import annotations

from .modules.cache import (
    KINDS,
    CacheView,
    CrossAttentionCache,
    DynamicCache,
    H2OCache,
    KVCache,
    PositionedBias,
    PositionedMask,
    QuantizedCache,
    SinkCache,
    SlidingWindowCache,
    SnapKVCache,
    StaticCache,
    cache_mask,
    make_cache,
)

__all__ = [
    "CacheView", "KVCache", "DynamicCache", "StaticCache", "SlidingWindowCache", "CrossAttentionCache",
    "SinkCache", "H2OCache", "SnapKVCache", "QuantizedCache",
    "PositionedMask", "PositionedBias", "cache_mask", "make_cache", "KINDS",
]
