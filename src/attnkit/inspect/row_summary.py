"""Per-row attention summaries in O(n) memory: entropy, max weight, top-k, sink mass, distance.

:class:`RowSummaryAccumulator` folds in a blockwise / flash kernel's score tiles one key
tile at a time, the way the online softmax does, and never forms the (L, S) weights;
:func:`row_summaries_from_weights` computes the same :class:`RowSummary` from dense
weights and is its reference.

- Milakov & Gimelshein 2018, "Online normalizer calculation for softmax",
  https://arxiv.org/abs/1805.02867 -- the running max and sum, rescaled when the max grows.
- Dao et al. 2022, "FlashAttention: Fast and Memory-Efficient Exact Attention with
  IO-Awareness", https://arxiv.org/abs/2205.14135 -- tiled attention that keeps only the
  row log-sum-exp, which :meth:`RowSummaryAccumulator.finalize` takes.

The numbers describe where the softmax put its mass, not what mattered for the output
(see :mod:`attnkit.inspect.metrics`).

Shape legend:
    B: batch size      H: heads
    L: queries         S: keys
    s: keys in one tile      k: top keys kept per row
    weights: (B, H, L, S); scores_tile: (B, H, L, s), -inf = masked; lse: (B, H, L).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnkit.core import online_softmax
from attnkit.inspect.row_metrics import _check_int, check_weights, mean_attention_distance

__all__ = [
    "RowSummary",
    "RowSummaryAccumulator",
    "row_summaries_from_weights",
]


@dataclass(frozen=True)
class RowSummary:
    """Per-row statistics of attention weights, as returned by
    :func:`row_summaries_from_weights` and :meth:`RowSummaryAccumulator.finalize`.

    Shapes (B, H, L) unless noted; fully masked rows are all zeros (indices -1):

    - ``entropy``: ``-sum_j p_ij log p_ij`` in nats (not normalised: the tiled path does
      not know how many keys were allowed).
    - ``max_weight``: ``max_j p_ij``.
    - ``topk_weights`` (B, H, L, k): the k largest weights, descending.
    - ``topk_indices`` (B, H, L, k) int64: their key indices; -1 where the weight is 0
      (fewer than k keys with non-zero weight).
    - ``sink_mass``: total weight on the ``sink_positions`` keys.
    - ``distance``: ``sum_j p_ij |i + offset - j|`` (see :func:`mean_attention_distance`).
    - ``mass``: ``sum_j p_ij``; 1 for a normal row, 0 for a fully masked one, and
      ``sigmoid(lse - sink)`` < 1 with attention sinks (``1 - mass`` is the sink's share, which
      no key and so none of the other fields includes; :mod:`attnkit.inspect.recompute`).
    """

    entropy: Tensor
    max_weight: Tensor
    topk_weights: Tensor
    topk_indices: Tensor
    sink_mass: Tensor
    distance: Tensor
    mass: Tensor


def _check_sinks(sink_positions) -> tuple[int, ...]:
    idx = (sink_positions,) if isinstance(sink_positions, int) else tuple(sink_positions)
    for p in idx:
        _check_int(p, "sink_positions")
        if p < 0:
            raise ValueError(
                f"sink_positions must be non-negative key indices (the tiled path does not know S); got {p}"
            )
    return tuple(sorted(set(idx)))


def _check_k(k) -> int:
    _check_int(k, "k")
    if k < 1:
        raise ValueError(f"k (number of top keys kept per row) must be >= 1; got {k}")
    return k


def row_summaries_from_weights(
    weights: Tensor, k: int = 5, *, sink_positions: int | Sequence[int] = 0, offset: int = 0
) -> RowSummary:
    """Per-row :class:`RowSummary` from dense (B, H, L, S) weights; the reference for
    :class:`RowSummaryAccumulator`.

    When ``k > S`` the top-k is padded with weight 0 / index -1. Sink positions at or
    past S contribute nothing.
    """
    weights = check_weights(weights)
    k, sinks = _check_k(k), _check_sinks(sink_positions)
    _check_int(offset, "offset")
    S = weights.shape[-1]
    top_w, top_i = weights.topk(min(k, S), dim=-1)  # (B, H, L, min(k, S))
    if k > S:
        pad = (*weights.shape[:-1], k - S)
        top_w = torch.cat([top_w, weights.new_zeros(pad)], -1)
        top_i = torch.cat([top_i, top_i.new_full(pad, -1)], -1)
    top_i = torch.where(top_w > 0, top_i, torch.full_like(top_i, -1))
    in_range = [p for p in sinks if p < S]
    return RowSummary(
        entropy=-torch.xlogy(weights, weights).sum(-1),
        max_weight=weights.amax(-1),
        topk_weights=top_w,
        topk_indices=top_i,
        sink_mass=weights[..., in_range].sum(-1),
        distance=mean_attention_distance(weights, offset),
        mass=weights.sum(-1),
    )


class RowSummaryAccumulator:
    """Per-row entropy, max weight, top-k, sink mass and distance from streamed score tiles.

    A blockwise / flash kernel sees the scores ``s_ij`` (scaled, masked with -inf) one
    key tile at a time and never forms the (L, S) weights ``p_ij = exp(s_ij - lse_i)``.
    This class keeps O(B·H·L·k) state, like the online softmax does:

    - running max ``m_i`` and ``Z_i = sum_j exp(s_ij - m_i)``;
    - ``T_i = sum_j exp(s_ij - m_i) (s_ij - m_i)`` for the entropy, because
      ``-sum_j p_ij log p_ij = sum_j p_ij (lse_i - s_ij)
                             = (lse_i - m_i) P_i - exp(m_i - lse_i) T_i``
      with ``P_i = exp(m_i - lse_i) Z_i`` (= 1 when lse is the row's log-sum-exp);
    - ``D_i = sum_j exp(s_ij - m_i) |i + offset - j|`` for the distance;
    - the k best scores with their key indices (merging each tile's top-k), and the raw
      scores of the sink keys.

    When a new tile raises the max from m to m', the sums are rescaled by
    ``a = exp(m - m')``: ``Z <- a Z``, ``D <- a D`` and, because ``(s - m') = (s - m) + (m - m')``,
    ``T <- a (T + (m - m') Z)``.

    :meth:`finalize` takes the row log-sum-exp the kernel computed (or uses its own) and
    turns the state into a :class:`RowSummary`. Tiles may come in any key order but must
    not overlap. Scores in float16/bfloat16 are accumulated in float32; float64 stays float64.

    Example::

        acc = RowSummaryAccumulator(k=3)
        for start in range(0, S, 128):
            acc.update(start, scores[..., start:start + 128])  # (B, H, L, s) each
        summary = acc.finalize(lse)  # lse: (B, H, L)
    """

    def __init__(self, k: int = 5, *, sink_positions: int | Sequence[int] = 0, offset: int = 0):
        self.k = _check_k(k)
        self.sink_positions = _check_sinks(sink_positions)
        _check_int(offset, "offset")
        self.offset = offset
        self.reset()

    def reset(self) -> None:
        """Forget every tile seen so far."""
        self._shape: tuple[int, int, int] | None = None
        self._spans: list[tuple[int, int]] = []

    def update(self, k_start: int, scores_tile: Tensor) -> None:
        """Fold in the scores of keys ``k_start .. k_start + s - 1``.

        Args:
            k_start: index of the tile's first key in the full key sequence.
            scores_tile: (B, H, L, s) scores after scaling and masking; -inf = masked.
        """
        _check_int(k_start, "k_start")
        if k_start < 0:
            raise ValueError(f"k_start must be >= 0; got {k_start}")
        s = check_weights(scores_tile, name="scores_tile")
        B, H, L, n = s.shape
        if self._shape is None:
            self._start(s)
        elif (B, H, L) != self._shape:
            raise ValueError(
                f"scores_tile must keep (B, H, L) = {self._shape} across updates; got {tuple(s.shape[:3])}"
            )
        end = k_start + n
        for a, b in self._spans:
            if k_start < b and a < end:
                raise ValueError(
                    f"scores_tile for keys [{k_start}, {end}) overlaps keys [{a}, {b}) already seen; "
                    "each key must be folded in once (call reset() to start over)"
                )
        if torch.isnan(s).any() or torch.isposinf(s).any():
            raise ValueError("scores_tile contains NaN or +inf; mask keys with -inf, not NaN")
        self._spans.append((k_start, end))
        s = s.detach().to(self._m.dtype)

        # the shared online-softmax step; rows that have seen only -inf keep m = -inf and are
        # shifted by 0 (the -inf guard); alpha is 0 where m was -inf, e is 0 on masked keys
        m_new, m_safe, e, alpha = online_softmax.step(self._m[..., None], s)
        m_new, m_safe, alpha = m_new[..., 0], m_safe[..., 0], alpha[..., 0]
        seen = self._z > 0
        d = s - m_safe[..., None]  # (B, H, L, n); -inf on masked keys
        ed = torch.where(e > 0, e * d, torch.zeros_like(e))  # avoid 0 * -inf
        self._t = torch.where(seen, alpha * (self._t + (self._m - m_safe) * self._z), torch.zeros_like(self._t))
        self._t = self._t + ed.sum(-1)
        self._z = alpha * self._z + e.sum(-1)
        q = torch.arange(L, device=s.device, dtype=s.dtype)[:, None] + self.offset
        j = torch.arange(k_start, end, device=s.device, dtype=s.dtype)[None, :]
        self._d = alpha * self._d + (e * (q - j).abs()).sum(-1)
        self._m = m_new

        top_s, top_i = s.topk(min(self.k, n), dim=-1)
        top_s = torch.cat([self._top_s, top_s], -1)
        top_i = torch.cat([self._top_i, top_i + k_start], -1)
        self._top_s, pick = top_s.topk(self.k, dim=-1)
        self._top_i = top_i.gather(-1, pick)

        for slot, p in enumerate(self.sink_positions):
            if k_start <= p < end:
                self._sink_s[..., slot] = s[..., p - k_start]

    def _start(self, s: Tensor) -> None:
        B, H, L, _ = s.shape
        self._shape = (B, H, L)
        dtype = torch.float64 if s.dtype == torch.float64 else torch.float32
        opts = dict(device=s.device, dtype=dtype)
        self._m = torch.full((B, H, L), -math.inf, **opts)
        self._z = torch.zeros((B, H, L), **opts)
        self._t = torch.zeros((B, H, L), **opts)
        self._d = torch.zeros((B, H, L), **opts)
        self._top_s = torch.full((B, H, L, self.k), -math.inf, **opts)
        self._top_i = torch.full((B, H, L, self.k), -1, device=s.device, dtype=torch.long)
        self._sink_s = torch.full((B, H, L, len(self.sink_positions)), -math.inf, **opts)

    def logsumexp(self) -> Tensor:
        """The row log-sum-exp of the tiles seen so far, (B, H, L); -inf for rows with no finite score."""
        self._require_updates()
        return online_softmax.finish(self._m, self._z)[1]

    def _require_updates(self) -> None:
        if self._shape is None:
            raise ValueError("RowSummaryAccumulator has seen no tiles: call update(k_start, scores_tile) first")

    def finalize(self, lse: Tensor | None = None) -> RowSummary:
        """Turn the accumulated state into a :class:`RowSummary`; the state is kept.

        Args:
            lse: (B, H, L) row log-sum-exp from the attention kernel (any value on fully
                masked rows); None to use :meth:`logsumexp` of the tiles seen. With attention
                sinks pass ``logaddexp(lse, sink)``, the sink-inclusive one: the weights are then
                the sink softmax's, and ``mass`` comes out below 1.
        """
        self._require_updates()
        if lse is None:
            lse = self.logsumexp()
        elif not isinstance(lse, Tensor) or tuple(lse.shape) != self._shape:
            got = tuple(lse.shape) if isinstance(lse, Tensor) else type(lse).__name__
            raise ValueError(f"lse must be a tensor of shape (B, H, L) = {self._shape}; got {got}")
        lse = lse.detach().to(self._m.dtype)
        valid = self._z > 0  # at least one finite score in the row
        if not torch.isfinite(lse[valid]).all():
            raise ValueError("lse is not finite on rows that have finite scores; pass the row log-sum-exp")
        zero = torch.zeros_like(self._z)
        lse = torch.where(valid, lse, zero)
        m = torch.where(valid, self._m, zero)
        scale = torch.where(valid, torch.exp(m - lse), zero)  # = max_j p_ij
        mass = scale * self._z
        entropy = torch.where(valid, (lse - m) * mass - scale * self._t, zero).clamp(min=0.0)
        top_w = torch.exp(self._top_s - lse[..., None])  # exp(-inf) = 0 on masked slots
        top_i = torch.where(top_w > 0, self._top_i, torch.full_like(self._top_i, -1))
        sink = torch.exp(self._sink_s - lse[..., None]).sum(-1)
        return RowSummary(
            entropy=entropy,
            max_weight=scale,
            topk_weights=top_w,
            topk_indices=top_i,
            sink_mass=sink,
            distance=scale * self._d,
            mass=mass,
        )
