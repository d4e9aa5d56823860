"""The base of the caches that keep a subset of the tokens: rows compacted, then evicted by a rule.

Used by :mod:`~attnkit.modules.cache_sink` (StreamingLLM), :mod:`~attnkit.modules.cache_h2o` and
:mod:`~attnkit.modules.cache_snapkv`. Row b's kept tokens sit in slots ``0 .. lengths[b]-1`` in the
order they arrived, with their absolute positions in ``_pos`` (B, capacity); new real tokens are
appended after them (padding is never stored, so batches of mixed lengths work as in
:class:`~attnkit.modules.cache_kinds.DynamicCache`). A subclass decides what to keep and calls
:meth:`_CompactCache._keep` with a (B, S) bool mask; the survivors move down, in order, so slots stay
contiguous. ``budget`` is the most tokens a row holds after every call.

The capacity grows (doubling) when a chunk arrives, so a long prompt may pass through before it is
cut down to the budget; one token at a time, a row never holds more than ``budget + 1`` slots, the
extra one only between the write and the eviction of a step.

Shape legend: B batch, Hkv key/value heads, L new tokens, S slots in use, E / Ev head dims.
"""

from __future__ import annotations

import torch

from ..core.checks import require_positive_int
from .cache_base import CacheView, KVCache, _scatter_rows


class _CompactCache(KVCache):
    """Rows of kept tokens, compacted; subclasses evict through :meth:`_keep`."""

    def __init__(self, budget: int):
        self.budget = require_positive_int("budget", budget)
        super().__init__()

    def _allocate(self, k, v) -> None:
        B, Hkv, L, E = k.shape
        self._alloc(B, Hkv, E, v.shape[3], max(self.budget + 1, L), k.dtype, k.device)
        self._extra_allocate(k, v)

    def _extra_allocate(self, k, v) -> None:
        """Per-slot statistics of a subclass (H2O's accumulated scores)."""

    def _alloc(self, B, Hkv, E, Ev, cap, dtype, device) -> None:
        self._k = torch.zeros(B, Hkv, cap, E, dtype=dtype, device=device)
        self._v = torch.zeros(B, Hkv, cap, Ev, dtype=dtype, device=device)
        self._pos = torch.zeros(B, cap, dtype=torch.long, device=device)

    def _grow_to(self, needed: int) -> None:
        cap = self._k.shape[2]
        if needed <= cap:
            return
        old = (self._k, self._v, self._pos)
        B, Hkv, _, E = self._k.shape
        self._alloc(B, Hkv, E, self._v.shape[3], max(needed, 2 * cap), self._k.dtype, self._k.device)
        self._k[:, :, :cap], self._v[:, :, :cap], self._pos[:, :cap] = old
        self._grow_extra(cap)

    def _grow_extra(self, old_cap: int) -> None:
        """Grow a subclass's per-slot statistics to the new capacity."""

    def _write(self, k, v, positions, valid, count) -> CacheView:
        B, Hkv, L, _ = k.shape
        new_len = self.lengths + count
        self._grow_to(int(new_len.max()))
        ok = valid if valid is not None else torch.ones(B, L, dtype=torch.bool, device=k.device)
        rows, cols = ok.nonzero(as_tuple=True)
        slots = self.lengths[rows] + (ok.long().cumsum(1) - 1)[rows, cols]
        _scatter_rows(self._k, k, rows, slots, cols)
        _scatter_rows(self._v, v, rows, slots, cols)
        self._pos[rows, slots] = positions[rows, cols]
        self.lengths = new_len
        self._uniform = None  # positions drive every mask here: no index fast path
        self.peak_nbytes = max(self.peak_nbytes, self.nbytes)
        return self.view()

    def view(self) -> CacheView:
        """What attention reads now: the kept slots, their absolute positions and validity."""
        S = max(1, int(self.lengths.max()))
        ok = torch.arange(S, device=self._k.device)[None, :] < self.lengths[:, None]  # (B, S)
        return CacheView(self._k[:, :, :S], self._v[:, :, :S], self._pos[:, :S], None if bool(ok.all()) else ok, False, False)

    def _keep(self, keep: torch.Tensor) -> None:
        """Keep the slots where ``keep`` (B, S) is True (in order); the rest are dropped."""
        B, S = keep.shape
        order = torch.sort((~keep).to(torch.int8), dim=1, stable=True).indices  # kept slots first, in order
        idx = order[:, None, :, None]
        self._k[:, :, :S] = self._k[:, :, :S].gather(2, idx.expand(-1, self._k.shape[1], -1, self._k.shape[3]))
        self._v[:, :, :S] = self._v[:, :, :S].gather(2, idx.expand(-1, self._v.shape[1], -1, self._v.shape[3]))
        self._pos[:, :S] = self._pos[:, :S].gather(1, order)
        self._keep_extra(order, S)
        self.lengths = keep.sum(1)

    def _keep_extra(self, order: torch.Tensor, S: int) -> None:
        """Move a subclass's per-slot statistics with the kept slots."""

    def kept_positions(self) -> list[list[int]]:
        """The absolute positions each row holds, oldest first (for tests and pictures)."""
        self._require_init("kept_positions()")
        return [self._pos[b, : int(n)].tolist() for b, n in enumerate(self.lengths)]

    def reorder(self, indices) -> None:
        super().reorder(indices)
        self._reorder_extra(indices)

    def _reorder_extra(self, indices) -> None:
        """Reorder a subclass's per-slot statistics (beam search)."""
