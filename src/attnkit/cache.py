"""Public name of the KV caches: ``attnkit.cache`` (implementation in :mod:`attnkit.modules.cache`).

>>> from attnkit.cache import DynamicCache, StaticCache, SlidingWindowCache, CrossAttentionCache
"""

from .modules.cache import (
    KINDS,
    CacheView,
    CrossAttentionCache,
    DynamicCache,
    KVCache,
    PositionedBias,
    PositionedMask,
    SlidingWindowCache,
    StaticCache,
    cache_mask,
    make_cache,
)

__all__ = [
    "CacheView", "KVCache", "DynamicCache", "StaticCache", "SlidingWindowCache", "CrossAttentionCache",
    "PositionedMask", "PositionedBias", "cache_mask", "make_cache", "KINDS",
]
