"""The KV cache: greedy decoding with a cache against recomputing the prefix, timed."""

from .experiment import KVCache

__all__ = ["KVCache"]
