"""SnapKV's cache: keep the keys the last few queries attend to, pooled over neighbours.

Li et al. 2024, "SnapKV: LLM Knows What You are Looking for Before Generation",
https://arxiv.org/abs/2404.14469 §4. The last ``window`` queries of a prompt (the *observation
window*) already attend to what the answer will need, so the attention they give each earlier key,

    score[b, j] = Σ_h Σ_{i in the window} P[b, h, i, j],   pooled: avg over ``kernel`` neighbouring j,

ranks the keys; the pooling keeps the neighbours of a chosen key, so a phrase survives whole. The
cache keeps the ``window`` latest tokens and the ``budget - window`` best of the others.

The paper compresses the prompt once. Here the same rule runs whenever a row holds more than
``budget`` tokens, with the cache's last ``window`` queries (stored after each call, rotated as
attention used them), so a prompt is compressed once and a long generation stays within the budget.
The window's (B, H, W, S) weights are formed directly (W is small). As in
:mod:`~attnkit.modules.cache_h2o`, a row keeps one set of tokens for all heads (the paper: per
head), and keys keep their absolute positions.

Shape legend: B batch, H query heads, W = window, S kept slots, E head dim; stored queries (B, H, W, E).
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from ..core.checks import require_positive_int
from .cache_compact import _CompactCache


class SnapKVCache(_CompactCache):
    """At most ``budget`` tokens per row: the last ``window`` and the best of the rest by the
    pooled attention of the last ``window`` queries."""

    kind = "snapkv"

    def __init__(self, budget: int, window: int = 32, kernel: int = 7):
        self.window, self.kernel = require_positive_int("window", window), require_positive_int("kernel", kernel)
        if window > budget:
            raise ValueError(f"window must be <= budget (the observation window is always kept), got window={window} > budget={budget}")
        if kernel % 2 == 0:
            raise ValueError(f"kernel must be odd (the pooling is centred on each key), got {kernel}")
        super().__init__(require_positive_int("budget", budget))

    def after_attention(self, q: torch.Tensor, q_pos: torch.Tensor, q_valid: torch.Tensor | None, res) -> None:
        """Remember the last ``window`` real queries of each row, then compress rows over budget."""
        self._remember(q, q_pos, q_valid)
        if bool((self.lengths > self.budget).any()):
            self._keep(self.keep_mask())

    def _remember(self, q, q_pos, q_valid) -> None:
        B, H, L, E = q.shape
        ok = torch.ones(B, L, dtype=torch.bool, device=q.device) if q_valid is None else q_valid
        if self._obs_q is None:
            W = self.window
            self._obs_q, self._obs_pos = q.new_zeros(B, H, W, E), q_pos.new_zeros(B, W)
            self._obs_ok = torch.zeros(B, W, dtype=torch.bool, device=q.device)
        # real queries last, in order: a stable sort of the chunk puts padding first
        order = torch.sort(ok.to(torch.int8), dim=1, stable=True).indices  # (B, L)
        qs = q.gather(2, order[:, None, :, None].expand(-1, H, -1, E))
        cat_q = torch.cat([self._obs_q, qs], 2)
        cat_pos, cat_ok = torch.cat([self._obs_pos, q_pos.gather(1, order)], 1), torch.cat([self._obs_ok, ok.gather(1, order)], 1)
        # each row's last W real queries: sort again so that real ones come last, keep the tail
        order2 = torch.sort(cat_ok.to(torch.int8), dim=1, stable=True).indices[:, -self.window:]
        self._obs_q = cat_q.gather(2, order2[:, None, :, None].expand(-1, H, -1, E))
        self._obs_pos, self._obs_ok = cat_pos.gather(1, order2), cat_ok.gather(1, order2)

    def scores(self) -> torch.Tensor:
        """(B, S) pooled attention of the stored window queries to each kept key. The (B, H, W, S)
        weights are formed here: W is a handful of queries, so they are as small as the cache."""
        view = self.view()
        S = view.k.shape[2]
        k_ok = view.valid if view.valid is not None else torch.ones(view.positions.shape, dtype=torch.bool, device=view.k.device)
        allowed = (self._obs_pos[:, :, None] >= view.positions[:, None, :]) & k_ok[:, None, :] & self._obs_ok[:, :, None]
        k = view.k.repeat_interleave(self._obs_q.shape[1] // view.k.shape[1], dim=1)  # GQA: one key head per query head
        s = (self._obs_q @ k.transpose(-1, -2)).float() * self._obs_q.shape[-1] ** -0.5  # (B, H, W, S)
        s = s.masked_fill(~allowed[:, None], float("-inf"))
        w = torch.softmax(s, -1).nan_to_num(0.0)  # a stored slot with no real query gives nothing
        score = w.sum((1, 2))  # (B, S)
        return F.avg_pool1d(score[:, None], self.kernel, 1, self.kernel // 2, count_include_pad=False)[:, 0, :S]

    def keep_mask(self) -> torch.Tensor:
        S = int(self.lengths.max())
        slot = torch.arange(S, device=self._k.device)[None, :]
        n = self.lengths[:, None]
        keep = (n <= self.budget) & (slot < n) | (slot >= n - self.window) & (slot < n)
        older = slot < n - self.window
        k = self.budget - self.window
        if k > 0:
            score = self.scores()[:, :S].masked_fill(~older, float("-inf"))
            top = score.topk(min(k, S), dim=1).indices
            keep |= torch.zeros_like(keep).scatter(1, top, True) & older
        return keep

    def reset(self) -> None:
        super().reset()
        self._obs_q = self._obs_pos = self._obs_ok = None

    def _reorder_extra(self, indices) -> None:
        if self._obs_q is not None:
            idx = torch.as_tensor(indices, device=self._obs_q.device).long()
            self._obs_q, self._obs_pos, self._obs_ok = self._obs_q[idx], self._obs_pos[idx], self._obs_ok[idx]
