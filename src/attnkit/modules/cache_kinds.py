"""The concrete caches: :class:`DynamicCache`, :class:`StaticCache`, :class:`SlidingWindowCache`
and :class:`CrossAttentionCache`.

The design, the references and the mixed-length batch rules are written out in
:mod:`attnkit.modules.cache` (public name ``attnkit.cache``). Each self-attention cache
subclasses :class:`~attnkit.modules.cache_base.KVCache` and only says where tokens go: the linear
caches put row b's i-th real token in slot i (growing by doubling, or in a fixed ``max_len``), the
sliding cache writes a ring buffer of the last ``window`` tokens and keeps each slot's absolute
position (keys are out of order, so masks use positions). The cross-attention cache holds encoder
keys/values, stored once and reused every step.

Shape legend: B batch, Hkv key/value heads, L new tokens, S cached slots, E / Ev head dims.
"""

from __future__ import annotations

import torch

from ..core.checks import require_positive_int
from .cache_base import CacheView, KVCache, _batch_msg, _check_indices, _scatter_rows


# ----------------------------------------------------------------------------------------------
class _LinearCache(KVCache):
    """Slot i of row b holds that row's i-th real token."""

    def _grow_to(self, needed: int) -> None:
        raise NotImplementedError

    def _allocate(self, k, v) -> None:
        self._alloc(k.shape[0], k.shape[1], k.shape[3], v.shape[3], self._initial_capacity(k.shape[2]), k.dtype, k.device)

    def _alloc(self, B, Hkv, E, Ev, cap, dtype, device) -> None:
        self._k = torch.zeros(B, Hkv, cap, E, dtype=dtype, device=device)
        self._v = torch.zeros(B, Hkv, cap, Ev, dtype=dtype, device=device)
        self._pos = torch.zeros(B, cap, dtype=torch.long, device=device)
        self.peak_nbytes = max(self.peak_nbytes, self.nbytes)

    def _write(self, k, v, positions, valid, count) -> CacheView:
        B, Hkv, L, _ = k.shape
        if self._uniform is not None:
            n0, S = self._uniform, self._uniform + L
            self._grow_to(S)
            self._k[:, :, n0:S] = k
            self._v[:, :, n0:S] = v
            self._pos[:, n0:S] = positions
            self._uniform = S
            self.lengths = self.lengths + L
            return CacheView(self._k[:, :, :S], self._v[:, :, :S], self._pos[:, :S], None, True, True)
        new_len = self.lengths + count
        S = int(new_len.max())
        self._grow_to(S)
        rows, cols = (valid if valid is not None else torch.ones(B, L, dtype=torch.bool, device=k.device)).nonzero(as_tuple=True)
        rank = (valid.long().cumsum(1) - 1)[rows, cols] if valid is not None else cols
        slots = self.lengths[rows] + rank
        _scatter_rows(self._k, k, rows, slots, cols)
        _scatter_rows(self._v, v, rows, slots, cols)
        self._pos[rows, slots] = positions[rows, cols]
        self.lengths = new_len
        ok = torch.arange(S, device=k.device)[None, :] < new_len[:, None]  # (B, S)
        return CacheView(self._k[:, :, :S], self._v[:, :, :S], self._pos[:, :S], ok, False, False)


class DynamicCache(_LinearCache):
    """Grows without bound; capacity doubles when full (amortised O(1) copies per token)."""

    kind = "dynamic"

    def __init__(self, *, initial_capacity: int = 64):
        self.initial_capacity = require_positive_int("initial_capacity", initial_capacity)
        super().__init__()

    def _initial_capacity(self, L: int) -> int:
        return max(self.initial_capacity, L)

    def _grow_to(self, needed: int) -> None:
        cap = self._k.shape[2]
        if needed <= cap:
            return
        new_cap = max(needed, 2 * cap)
        old = (self._k, self._v, self._pos)
        B, Hkv, _, E = self._k.shape
        self._alloc(B, Hkv, E, self._v.shape[3], new_cap, self._k.dtype, self._k.device)
        # old and new buffers are both alive during the copy: that is the true peak
        self.peak_nbytes = max(self.peak_nbytes, self.nbytes + sum(t.nelement() * t.element_size() for t in old))
        self._k[:, :, :cap], self._v[:, :, :cap], self._pos[:, :cap] = old


class StaticCache(_LinearCache):
    """``max_len`` slots per row, allocated on the first update; more tokens than that is an error."""

    kind = "static"

    def __init__(self, max_len: int):
        self.max_len = require_positive_int("max_len", max_len)
        super().__init__()

    def _initial_capacity(self, L: int) -> int:
        return self.max_len

    def _grow_to(self, needed: int) -> None:
        if needed > self.max_len:
            held = int(self.lengths.max())
            raise ValueError(
                f"StaticCache(max_len={self.max_len}) overflow: a row holds {held} tokens and {needed - held} more were written "
                f"(needs {needed} slots); build it with max_len >= {needed}, or use DynamicCache or SlidingWindowCache"
            )


class SlidingWindowCache(KVCache):
    """Ring buffer of each row's last ``window`` real tokens, for ``sliding_window(left=window-1)``
    attention. Slot = (token count) mod window; positions are stored per slot and masks use them."""

    kind = "sliding"

    def __init__(self, window: int):
        self.window = require_positive_int("window", window)
        super().__init__()

    def _allocate(self, k, v) -> None:
        B, Hkv, _, E = k.shape
        w = self.window
        self._k = torch.zeros(B, Hkv, w, E, dtype=k.dtype, device=k.device)
        self._v = torch.zeros(B, Hkv, w, v.shape[3], dtype=v.dtype, device=v.device)
        self._pos = torch.zeros(B, w, dtype=torch.long, device=k.device)
        self.peak_nbytes = max(self.peak_nbytes, self.nbytes)

    def _filled(self) -> torch.Tensor:
        return torch.arange(self.window, device=self._k.device)[None, :] < self.lengths.clamp(max=self.window)[:, None]  # (B, w)

    def _write(self, k, v, positions, valid, count) -> CacheView:
        B, Hkv, L, _ = k.shape
        w = self.window
        if L > 1:
            # queries early in the chunk need keys the chunk itself evicts: attend over old ring + chunk
            F = min(int(self.lengths.max()), w)
            old_ok = self._filled()[:, :F]
            new_ok = valid if valid is not None else torch.ones(B, L, dtype=torch.bool, device=k.device)
            view = CacheView(
                torch.cat([self._k[:, :, :F], k], 2), torch.cat([self._v[:, :, :F], v], 2),
                torch.cat([self._pos[:, :F], positions], 1), torch.cat([old_ok, new_ok], 1), False, False,
            )
        mask = valid if valid is not None else torch.ones(B, L, dtype=torch.bool, device=k.device)
        rank = mask.long().cumsum(1) - 1
        # only each row's last `window` real tokens of the chunk survive; writing only them keeps slots distinct
        keep = mask & (rank >= (count - w)[:, None])
        rows, cols = keep.nonzero(as_tuple=True)
        slots = (self.lengths[rows] + rank[rows, cols]) % w
        _scatter_rows(self._k, k, rows, slots, cols)
        _scatter_rows(self._v, v, rows, slots, cols)
        self._pos[rows, slots] = positions[rows, cols]
        self.lengths = self.lengths + count
        if self._uniform is not None:
            self._uniform += L
        if L > 1:
            return view
        F = min(int(self.lengths.max()), w)
        ok = self._filled()[:, :F]
        uniform = self._uniform is not None
        # one query, default positions, equal rows: the ring holds exactly its window
        return CacheView(self._k[:, :, :F], self._v[:, :, :F], self._pos[:, :F], None if uniform else ok, False, uniform)


# ----------------------------------------------------------------------------------------------
class CrossAttentionCache:
    """Encoder keys/values for cross-attention, projected once (first call) and reused after."""

    kind = "cross"

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._k = self._v = None
        self.valid: torch.Tensor | None = None  # (B, S) encoder padding, True = real token

    @property
    def initialized(self) -> bool:
        return self._k is not None

    filled = initialized

    @property
    def batch_size(self) -> int | None:
        return None if self._k is None else self._k.shape[0]

    @property
    def nbytes(self) -> int:
        if self._k is None:
            return 0
        return sum(t.nelement() * t.element_size() for t in (self._k, self._v, self.valid) if t is not None)

    kv_nbytes = nbytes

    def store(self, k: torch.Tensor, v: torch.Tensor, valid: torch.Tensor | None = None) -> CacheView:
        if self._k is not None:
            raise ValueError("CrossAttentionCache already holds encoder keys; pass key=None to reuse them, or reset() it for a new input")
        if k.dim() != 4 or v.dim() != 4 or k.shape[:3] != v.shape[:3]:
            raise ValueError(f"cross cache needs k (B, Hkv, S, E), v (B, Hkv, S, Ev), got {tuple(k.shape)} and {tuple(v.shape)}")
        if valid is not None and (valid.dtype != torch.bool or valid.shape != (k.shape[0], k.shape[2])):
            raise ValueError(f"encoder padding must be a bool (B, S)=({k.shape[0]}, {k.shape[2]}) tensor, got {valid.dtype} {tuple(valid.shape)}")
        self._k, self._v = k, v
        self.valid = None if valid is None or bool(valid.all()) else valid
        return self.view()

    def view(self, batch: int | None = None) -> CacheView:
        if self._k is None:
            raise ValueError("CrossAttentionCache is empty; the first call must pass key= (the encoder output) to fill it")
        if batch is not None and batch != self._k.shape[0]:
            raise ValueError(_batch_msg(self, self._k.shape[0], batch))
        S = self._k.shape[2]
        pos = torch.arange(S, device=self._k.device)[None, :]
        return CacheView(self._k, self._v, pos, self.valid, False, False)

    def reorder(self, indices) -> None:
        if self._k is None:
            raise ValueError("CrossAttentionCache.reorder() called before the cache holds anything; fill it with a forward pass first")
        idx = _check_indices(indices, self._k.shape[0], self._k.device)
        self._k, self._v = self._k.index_select(0, idx), self._v.index_select(0, idx)
        if self.valid is not None:
            self.valid = self.valid.index_select(0, idx)

    def __repr__(self) -> str:
        return "CrossAttentionCache(empty)" if self._k is None else f"CrossAttentionCache(B={self._k.shape[0]}, S={self._k.shape[2]})"
