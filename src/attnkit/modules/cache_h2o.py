"""H2O's cache: the recent tokens and the "heavy hitters", the keys that received the most attention.

Zhang et al. 2023, "H2O: Heavy-Hitter Oracle for Efficient Generative Inference of Large Language
Models", https://arxiv.org/abs/2306.14048 §3. Attention is sparse and a few keys collect most of
it across queries; their accumulated attention ranks them. After every step each row keeps its
last ``recent`` tokens and, of the others, the ``budget - recent`` with the largest score

    acc[b, j] = Σ over the queries that have seen key j, over the query heads, of P[b, h, i, j],

the weights of each call summed over its queries — :func:`attnkit.attention`'s ``key_scores``,
computed from the fused path in O(n) memory, so no (L, S) weight matrix is ever built.
:class:`~attnkit.modules.multihead.MultiHeadAttention` asks for them when the cache sets
``needs_key_scores`` and hands them back through :meth:`H2OCache.after_attention`.

One choice differs from the paper: a row keeps one set of tokens for all its heads (scores summed
over heads), because a cache view has one position per slot for all heads; the paper keeps a set
per head. Keys keep their absolute positions (rotated once, as in a dynamic cache), as H2O does.

Shape legend: B batch, H query heads, S kept slots; key scores (B, H, S).
"""

from __future__ import annotations

import torch

from ..core.checks import require_positive_int
from .cache_compact import _CompactCache


class H2OCache(_CompactCache):
    """At most ``budget`` tokens per row: the last ``recent`` and the heaviest hitters of the rest."""

    kind = "h2o"
    needs_key_scores = True

    def __init__(self, budget: int, recent: int | None = None):
        recent = budget // 2 if recent is None else recent
        if isinstance(recent, bool) or not isinstance(recent, int) or not 0 < recent <= budget:
            raise ValueError(f"recent must be an int in [1, budget={budget}] (the last tokens always kept), got {recent!r}")
        self.recent = recent
        super().__init__(require_positive_int("budget", budget))

    def _extra_allocate(self, k, v) -> None:
        self._acc = torch.zeros(k.shape[0], self._k.shape[2], dtype=torch.float64, device=k.device)

    def _grow_extra(self, old_cap: int) -> None:
        acc = self._acc
        self._acc = acc.new_zeros(acc.shape[0], self._k.shape[2])
        self._acc[:, :old_cap] = acc

    def _keep_extra(self, order, S) -> None:
        self._acc[:, :S] = self._acc[:, :S].gather(1, order)

    def _reorder_extra(self, indices) -> None:
        self._acc = self._acc.index_select(0, torch.as_tensor(indices, device=self._acc.device).long())

    def after_attention(self, q, q_pos, q_valid, res) -> None:
        """Add this call's key scores (B, H, S) to the accumulated ones, then evict to ``budget``."""
        S = res.key_scores.shape[-1]
        self._acc[:, :S] += res.key_scores.sum(1).to(self._acc.dtype)
        self._keep(self.keep_mask())
        # dropped slots' scores moved past the kept ones: clear them before new tokens land there
        self._acc.masked_fill_(torch.arange(self._acc.shape[1], device=self._acc.device)[None, :] >= self.lengths[:, None], 0.0)

    def keep_mask(self) -> torch.Tensor:
        """(B, S) True for the slots H2O keeps: all of a row within budget, else the last ``recent``
        and the top ``budget - recent`` of the others by accumulated score."""
        S = int(self.lengths.max())
        slot = torch.arange(S, device=self._acc.device)[None, :]
        n = self.lengths[:, None]
        recent = (slot >= n - self.recent) & (slot < n)
        older = slot < n - self.recent
        keep = recent | (n <= self.budget) & (slot < n)
        k = self.budget - self.recent
        if k > 0 and S > self.recent:
            score = self._acc[:, :S].masked_fill(~older, float("-inf"))
            top = score.topk(min(k, S), dim=1).indices
            picked = torch.zeros_like(keep).scatter(1, top, True) & older
            keep |= picked
        return keep
