"""Per-head attention diagnostics: entropy, peakiness, distance, sinks, positional mass.

What the numbers come from:

- Clark et al. 2019, "What Does BERT Look At? An Analysis of BERT's Attention",
  https://arxiv.org/abs/1906.04341 -- previous/next-token heads, heads parked on
  [CLS]/[SEP] ("no-op" heads), per-head attention entropy.
- Voita et al. 2019, "Analyzing Multi-Head Self-Attention: Specialized Heads Do the
  Heavy Lifting, the Rest Can Be Pruned", https://arxiv.org/abs/1905.09418 --
  positional heads.
- Dosovitskiy et al. 2020 (ViT), https://arxiv.org/abs/2010.11929 -- mean attention
  distance.
- Xiao et al. 2023, "Efficient Streaming Language Models with Attention Sinks",
  https://arxiv.org/abs/2309.17453 -- mass parked on the first token.

Attention weights are not explanations (Jain & Wallace 2019,
https://arxiv.org/abs/1902.10186; Wiegreffe & Pinter 2019,
https://arxiv.org/abs/1908.04626). Every function here describes *where a head's
softmax puts its mass*, nothing more: a large weight does not mean the key mattered
for the output (the value vector may be tiny, later layers may undo it), and a head
labelled ``content`` is only "not explained by the simple patterns below". Use
ablation (:func:`attnkit.inspect.rollout.head_importance`) for questions about
importance.

Shape legend:
    B: batch size      H: heads
    L: queries         S: keys
    weights: (B, H, L, S), each row summing to 1, or to 0 on a fully masked row.

The file has three parts: per-row metrics on dense weights; per-row summaries that
never hold the (L, S) matrix (:class:`RowSummaryAccumulator`, for blockwise / flash
kernels); and per-head classification (:func:`classify_heads` -> :class:`HeadSummary`).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields

import torch
from torch import Tensor

__all__ = [
    "HEAD_LABELS",
    "normalized_entropy",
    "max_weight",
    "mean_attention_distance",
    "sink_mass",
    "previous_token_mass",
    "next_token_mass",
    "self_mass",
    "classify_heads",
    "HeadStats",
    "HeadSummary",
    "HeadThresholds",
    "RowSummary",
    "RowSummaryAccumulator",
    "row_summaries_from_weights",
]


# --------------------------------------------------------------------------- checks


def check_weights(weights: Tensor, name: str = "weights") -> Tensor:
    """Validate a (B, H, L, S) floating tensor of attention weights and return it."""
    if not isinstance(weights, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape (B, H, L, S); got {type(weights).__name__}")
    if weights.ndim != 4:
        raise ValueError(
            f"{name} must have shape (B, H, L, S); got ndim={weights.ndim}, shape {tuple(weights.shape)}. "
            f"For one sequence's (H, L, S) weights pass {name}[None]."
        )
    if not weights.is_floating_point():
        raise TypeError(f"{name} must be a floating tensor; got dtype {weights.dtype}. Pass {name}.float().")
    return weights


def expand_key_mask(key_mask: Tensor | None, weights: Tensor, name: str = "key_mask") -> Tensor | None:
    """Turn a (B, S) padding mask or a 4-D mask into a bool mask broadcastable to ``weights``.

    True means "this query may attend to this key". A 2-D mask is always read as a
    (B, S) key padding mask; anything else (a causal (L, S) mask, a per-head mask)
    must be given 4-D, e.g. ``causal[None, None]``.
    """
    if key_mask is None:
        return None
    if not isinstance(key_mask, Tensor):
        raise TypeError(f"{name} must be a bool torch.Tensor; got {type(key_mask).__name__}")
    if key_mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must have dtype torch.bool (True = may attend); got {key_mask.dtype}. Pass {name}.bool()."
        )
    B, H, L, S = weights.shape
    if key_mask.ndim == 2:
        if tuple(key_mask.shape) != (B, S):
            raise ValueError(
                f"a 2-D {name} is a (B, S) key padding mask: expected ({B}, {S}), got {tuple(key_mask.shape)}. "
                f"For an (L, S) mask such as a causal one pass {name}[None, None]."
            )
        key_mask = key_mask[:, None, None, :]
    elif key_mask.ndim == 4:
        try:
            torch.broadcast_shapes(tuple(key_mask.shape), tuple(weights.shape))
        except RuntimeError:
            raise ValueError(
                f"{name} of shape {tuple(key_mask.shape)} does not broadcast to weights (B, H, L, S) = "
                f"{tuple(weights.shape)}"
            ) from None
    else:
        raise ValueError(
            f"{name} must be (B, S) or 4-D broadcastable to (B, H, L, S) = {tuple(weights.shape)}; "
            f"got shape {tuple(key_mask.shape)}"
        )
    return key_mask.to(weights.device)


# ------------------------------------------------------------------- per-row metrics


def normalized_entropy(weights: Tensor, key_mask: Tensor | None = None) -> Tensor:
    """Entropy of each row divided by the log of the number of keys it was allowed to see.

    ``H_i = -sum_j w_ij log w_ij`` over allowed keys, divided by ``log n_i`` where
    ``n_i`` is the number of allowed keys of row i (all S keys when ``key_mask`` is
    None). 1 means uniform over the allowed keys, 0 means one-hot. Rows with fewer
    than two allowed keys, and fully masked rows, get 0 (there was no choice to make).
    Weight sitting on disallowed keys is ignored.

    Without ``key_mask`` a causal model's early rows are compared against log S and
    look more peaked than they are: pass ``torch.ones(L, S, dtype=torch.bool).tril()[None, None]``.

    Args:
        weights: (B, H, L, S).
        key_mask: optional bool, (B, S) key padding or 4-D broadcastable to (B, H, L, S);
            True = may attend.

    Returns:
        (B, H, L) in [0, 1].
    """
    weights = check_weights(weights)
    mask = expand_key_mask(key_mask, weights)
    w = weights if mask is None else weights * mask
    entropy = -torch.xlogy(w, w).sum(-1)  # 0 log 0 = 0
    if mask is None:
        n = torch.full_like(entropy, weights.shape[-1])
    else:
        n = mask.expand(weights.shape).sum(-1).to(weights.dtype)
    # log(1) = 0 and log(0) = -inf: rows with < 2 choices are defined as 0.
    log_n = torch.log(n.clamp(min=2.0))
    out = torch.where(n >= 2, entropy / log_n, torch.zeros_like(entropy))
    return out.clamp(0.0, 1.0)


def max_weight(weights: Tensor) -> Tensor:
    """Largest weight of each row, (B, H, L); 1 for a one-hot row, 1/S for a uniform one, 0 when fully masked."""
    return check_weights(weights).amax(-1)


def mean_attention_distance(weights: Tensor, offset: int = 0) -> Tensor:
    """Expected key distance of each row: ``sum_j w_ij |i + offset - j|`` in positions, (B, H, L).

    ``offset`` aligns query i with key position ``i + offset``: 0 when queries and keys
    are the same sequence, ``S - L`` when the L queries are the last L of S keys (decoding
    with a KV cache). Fully masked rows give 0. For 2-D patch grids this is a 1-D
    (raster-order) distance, not the Euclidean pixel distance used in the ViT paper.
    """
    weights = check_weights(weights)
    _check_int(offset, "offset")
    L, S = weights.shape[-2:]
    q = torch.arange(L, device=weights.device, dtype=weights.dtype)[:, None] + offset
    k = torch.arange(S, device=weights.device, dtype=weights.dtype)[None, :]
    return (weights * (q - k).abs()).sum(-1)  # (B, H, L)


def sink_mass(weights: Tensor, positions: int | Sequence[int] | Tensor = 0) -> Tensor:
    """Total weight each row puts on "sink" keys, (B, H, L).

    ``positions`` is a key index (default 0: the first token / BOS / [CLS]), a sequence
    of key indices (negative ones count from the end, e.g. -1 for a final [SEP]), or a
    (B, S) bool tensor marking sink keys per sequence (e.g. every [SEP]).
    """
    weights = check_weights(weights)
    B, H, L, S = weights.shape
    if isinstance(positions, Tensor):
        mask = expand_key_mask(positions, weights, name="positions")
        return (weights * mask).sum(-1)
    idx = [positions] if isinstance(positions, int) else list(positions)
    for p in idx:
        _check_int(p, "positions")
        if not -S <= p < S:
            raise ValueError(f"positions must be key indices in [-{S}, {S}); got {p}")
    idx = sorted({p % S for p in idx})
    return weights[..., idx].sum(-1)


def _diagonal_mass(weights: Tensor, shift: int) -> tuple[Tensor, Tensor]:
    """Weight on key ``i + shift`` for every row i, and a (L,) mask of rows where that key exists."""
    L, S = weights.shape[-2:]
    j = torch.arange(L, device=weights.device) + shift  # (L,)
    exists = (j >= 0) & (j < S)
    picked = weights.gather(-1, j.clamp(0, S - 1).expand(*weights.shape[:-1])[..., None])[..., 0]
    return picked * exists, exists


def previous_token_mass(weights: Tensor, offset: int = 0) -> Tensor:
    """Weight on the key just before the query's own position (key ``i + offset - 1``), (B, H, L).

    Rows whose previous key does not exist (the first token) get 0. See
    :func:`mean_attention_distance` for ``offset``.
    """
    _check_int(offset, "offset")
    return _diagonal_mass(check_weights(weights), offset - 1)[0]


def next_token_mass(weights: Tensor, offset: int = 0) -> Tensor:
    """Weight on the key just after the query's own position (key ``i + offset + 1``), (B, H, L); 0 past the end."""
    _check_int(offset, "offset")
    return _diagonal_mass(check_weights(weights), offset + 1)[0]


def self_mass(weights: Tensor, offset: int = 0) -> Tensor:
    """Weight on the query's own position (key ``i + offset``), (B, H, L); 0 where that key does not exist."""
    _check_int(offset, "offset")
    return _diagonal_mass(check_weights(weights), offset)[0]


def _check_int(value, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int; got {type(value).__name__} {value!r}")


# ------------------------------------------------------------ O(n) row summaries


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
    - ``mass``: ``sum_j p_ij``; 1 for a normal row, 0 for a fully masked one.
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

        m_new = torch.maximum(self._m, s.amax(-1))
        # Rows that have seen only -inf keep m = -inf; shift by 0 there to avoid inf - inf.
        m_safe = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
        seen = self._z > 0
        alpha = torch.exp(self._m - m_safe)  # 0 where m was -inf
        d = s - m_safe[..., None]  # (B, H, L, n); -inf on masked keys
        e = torch.exp(d)  # 0 on masked keys
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
        m_safe = torch.where(torch.isneginf(self._m), torch.zeros_like(self._m), self._m)
        return torch.where(self._z > 0, m_safe + torch.log(self._z), torch.full_like(self._z, -math.inf))

    def _require_updates(self) -> None:
        if self._shape is None:
            raise ValueError("RowSummaryAccumulator has seen no tiles: call update(k_start, scores_tile) first")

    def finalize(self, lse: Tensor | None = None) -> RowSummary:
        """Turn the accumulated state into a :class:`RowSummary`; the state is kept.

        Args:
            lse: (B, H, L) row log-sum-exp from the attention kernel (any value on fully
                masked rows); None to use :meth:`logsumexp` of the tiles seen.
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


# ------------------------------------------------------------------ classification

#: Labels :func:`classify_heads` can give, in the order its rules are tried.
HEAD_LABELS = ("dead", "uniform", "positional-previous", "positional-next", "positional-self", "content")

#: A head is ``dead`` when this share of every row's mass sits on one fixed key (or on
#: the special keys). 0.8 flags the [CLS]/[SEP]/BOS-parked heads of Clark et al. 2019,
#: whose sink mass is typically > 0.9, while a causal prev-token head (first row forced
#: onto key 0) stays far below it.
DEAD_MASS = 0.8
#: A head is ``uniform`` when its mean normalised entropy reaches this (1 = exactly uniform).
UNIFORM_ENTROPY = 0.9
#: A head is positional when its mean mass on the previous / next / own key reaches this.
POSITIONAL_MASS = 0.5


@dataclass(frozen=True)
class HeadThresholds:
    """Thresholds of :func:`classify_heads`; each in (0, 1]. See the module constants."""

    dead_mass: float = DEAD_MASS
    uniform_entropy: float = UNIFORM_ENTROPY
    positional_mass: float = POSITIONAL_MASS

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
                raise ValueError(f"HeadThresholds.{f.name} must be a number in (0, 1]; got {value!r}")

    def label(self, n: dict) -> tuple[str, str]:
        """(label, reason) for one head's numbers (the fields of :class:`HeadStats`)."""
        if math.isnan(n["fixed_mass"]):
            return "dead", "no valid rows (every row fully masked)"
        if n["fixed_mass"] >= self.dead_mass:
            return "dead", (
                f"fixed_mass {n['fixed_mass']:.3f} >= {self.dead_mass} on key {n['fixed_position']}"
            )
        special = n.get("special_mass")
        if special is not None and special >= self.dead_mass:
            return "dead", f"special_mass {special:.3f} >= {self.dead_mass}"
        if n["entropy"] >= self.uniform_entropy:
            return "uniform", f"entropy {n['entropy']:.3f} >= {self.uniform_entropy}"
        positional = {
            "positional-previous": n["previous_mass"],
            "positional-next": n["next_mass"],
            "positional-self": n["self_mass"],
        }
        best = max(positional, key=lambda name: -1.0 if math.isnan(positional[name]) else positional[name])
        value = positional[best]
        if not math.isnan(value) and value >= self.positional_mass:
            field = {"positional-previous": "previous_mass", "positional-next": "next_mass"}.get(best, "self_mass")
            return best, f"{field} {value:.3f} >= {self.positional_mass}"
        return "content", (
            f"fixed_mass {n['fixed_mass']:.3f} < {self.dead_mass}, entropy {n['entropy']:.3f} < "
            f"{self.uniform_entropy}, max positional mass {0.0 if math.isnan(value) else value:.3f} "
            f"< {self.positional_mass}"
        )


@dataclass(frozen=True)
class HeadStats:
    """One head's numbers (means over valid rows, see :func:`classify_heads`) and its label."""

    layer: int
    head: int
    label: str
    entropy: float
    max_weight: float
    distance: float
    sink_mass: float
    previous_mass: float
    next_mass: float
    self_mass: float
    fixed_mass: float
    fixed_position: int
    special_mass: float | None
    reason: str


@dataclass(frozen=True)
class HeadSummary:
    """Tabular result of :func:`classify_heads`: one :class:`HeadStats` per (layer, head).

    Index with ``summary[layer, head]``; iterate for the rows in (layer, head) order;
    render with :meth:`to_text` (also ``str()``), :meth:`to_markdown`, :meth:`to_html`
    (also Jupyter's rich display); :meth:`metric` gives a (layers, heads) tensor for plots.
    """

    stats: tuple[HeadStats, ...]
    thresholds: HeadThresholds = HeadThresholds()

    #: Numeric columns, in display order.
    METRICS = (
        "entropy", "max_weight", "distance", "sink_mass", "previous_mass",
        "next_mass", "self_mass", "fixed_mass", "special_mass",
    )

    @property
    def num_layers(self) -> int:
        return 1 + max((s.layer for s in self.stats), default=-1)

    @property
    def num_heads(self) -> int:
        """The largest head count of any layer."""
        return 1 + max((s.head for s in self.stats), default=-1)

    def __len__(self) -> int:
        return len(self.stats)

    def __iter__(self):
        return iter(self.stats)

    def __getitem__(self, key: tuple[int, int]) -> HeadStats:
        for s in self.stats:
            if (s.layer, s.head) == tuple(key):
                return s
        raise KeyError(f"no head (layer, head) = {key!r}; have {self.num_layers} layers x {self.num_heads} heads")

    def labels(self) -> list[list[str]]:
        """Labels as ``labels()[layer][head]``."""
        out: list[list[str]] = [[] for _ in range(self.num_layers)]
        for s in self.stats:
            out[s.layer].append(s.label)
        return out

    def counts(self) -> dict[str, int]:
        """How many heads got each label (every label present, possibly 0)."""
        out = dict.fromkeys(HEAD_LABELS, 0)
        for s in self.stats:
            out[s.label] += 1
        return out

    def metric(self, name: str) -> Tensor:
        """A (layers, max heads) float64 tensor of one numeric column; NaN where a layer has fewer heads."""
        if name not in self.METRICS:
            raise ValueError(f"name must be one of {', '.join(self.METRICS)}; got {name!r}")
        out = torch.full((self.num_layers, self.num_heads), math.nan, dtype=torch.float64)
        for s in self.stats:
            value = getattr(s, name)
            out[s.layer, s.head] = math.nan if value is None else value
        return out

    def columns(self) -> list[str]:
        """Column names of :meth:`to_rows` (``special_mass`` only when it was computed)."""
        metrics = [m for m in self.METRICS if m != "special_mass" or self._has_special()]
        return ["layer", "head", "label", *metrics, "fixed_position", "reason"]

    def _has_special(self) -> bool:
        return any(s.special_mass is not None for s in self.stats)

    def to_rows(self) -> list[dict]:
        """One plain dict per head (JSON-ready), keys as :meth:`columns`."""
        cols = self.columns()
        return [{c: v for c, v in asdict(s).items() if c in cols} for s in self.stats]

    def _cells(self, digits: int) -> tuple[list[str], list[list[str]]]:
        cols = self.columns()
        body = []
        for row in self.to_rows():
            body.append([
                f"{row[c]:.{digits}f}" if isinstance(row[c], float) else str(row[c]) for c in cols
            ])
        return cols, body

    def to_text(self, digits: int = 3) -> str:
        """Aligned plain-text table."""
        cols, body = self._cells(digits)
        widths = [max(len(c), *(len(r[i]) for r in body)) if body else len(c) for i, c in enumerate(cols)]
        line = lambda cells: "  ".join(x.ljust(w) for x, w in zip(cells, widths, strict=True)).rstrip()  # noqa: E731
        return "\n".join([line(cols), line(["-" * w for w in widths]), *(line(r) for r in body)])

    def to_markdown(self, digits: int = 3) -> str:
        """GitHub-flavoured markdown table (``|`` in cells escaped)."""
        cols, body = self._cells(digits)
        esc = lambda x: x.replace("|", "\\|")  # noqa: E731
        rows = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
        rows += ["| " + " | ".join(esc(x) for x in r) + " |" for r in body]
        return "\n".join(rows)

    def to_html(self, digits: int = 3) -> str:
        """An HTML ``<table class="attnkit-heads">``; every cell escaped."""
        cols, body = self._cells(digits)
        head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
        rows = "".join(
            f'<tr class="label-{html.escape(r[2])}">' + "".join(f"<td>{html.escape(x)}</td>" for x in r) + "</tr>"
            for r in body
        )
        return f'<table class="attnkit-heads"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'

    def __str__(self) -> str:
        return self.to_text()

    def _repr_html_(self) -> str:
        return self.to_html()




def _head_mean(values: Tensor, valid: Tensor) -> Tensor:
    """Mean of (B, H, L) ``values`` over the valid rows of each head -> (H,); NaN for a head with none."""
    valid = valid.expand(values.shape).to(values.dtype)
    count = valid.sum((0, 2))
    total = (values * valid).sum((0, 2))
    return torch.where(count > 0, total / count.clamp(min=1), torch.full_like(total, math.nan))


def _positional_head_mean(w: Tensor, valid: Tensor, mask: Tensor | None, shift: int) -> Tensor:
    """Per-head mean weight on key ``i + shift`` over valid rows whose target key exists and is allowed -> (H,)."""
    L, S = w.shape[-2:]
    mass, exists = _diagonal_mass(w, shift)
    ok = valid & exists
    if mask is not None:  # the target key must also be allowed for this row
        j = (torch.arange(L, device=w.device) + shift).clamp(0, S - 1)
        ok = ok & mask.expand(w.shape).gather(-1, j.expand(*w.shape[:-1])[..., None])[..., 0]
    return _head_mean(mass, ok)


def _stack_layers(attentions) -> list[Tensor]:
    if isinstance(attentions, Tensor):
        if attentions.ndim == 5:
            return list(attentions.unbind(0))
        raise ValueError(
            f"attentions must be a sequence of per-layer (B, H, L, S) tensors or one (layers, B, H, L, S) "
            f"tensor; got a tensor of shape {tuple(attentions.shape)}. For a single layer pass [weights]."
        )
    if not isinstance(attentions, Sequence) or len(attentions) == 0:
        raise ValueError(
            "attentions must be a non-empty sequence of per-layer (B, H, L, S) tensors; "
            f"got {type(attentions).__name__}"
        )
    layers = [check_weights(a, name=f"attentions[{i}]") for i, a in enumerate(attentions)]
    first = layers[0].shape
    for i, a in enumerate(layers):
        if (a.shape[0], a.shape[2], a.shape[3]) != (first[0], first[2], first[3]):
            raise ValueError(
                f"every layer must share B, L, S; attentions[0] has shape {tuple(first)} "
                f"but attentions[{i}] has {tuple(a.shape)}"
            )
    return layers


def classify_heads(
    attentions: Sequence[Tensor] | Tensor,
    *,
    key_mask: Tensor | None = None,
    query_mask: Tensor | None = None,
    special_keys: Tensor | None = None,
    offset: int = 0,
    thresholds: HeadThresholds | None = None,
) -> HeadSummary:
    """Label every (layer, head) by the simplest pattern that explains where its mass goes.

    Per head, over all valid rows (rows with non-zero mass, and allowed by ``query_mask``)
    of every sequence in the batch, it computes the means of :func:`normalized_entropy`,
    :func:`max_weight`, :func:`mean_attention_distance`, :func:`sink_mass` (key 0),
    :func:`previous_token_mass`, :func:`next_token_mass` and :func:`self_mass` (the
    positional masses only over rows whose target key exists and is allowed), plus:

    - ``fixed_mass``: per sequence, the largest column mean ``max_j mean_i w_ij`` -- the
      share of every row's mass that goes to one and the same key -- averaged over the
      batch; ``fixed_position`` is that key (the most common one across the batch).
    - ``special_mass``: mean weight on ``special_keys`` (e.g. every [CLS]/[SEP]), when given.

    The label is the first rule that fires, thresholds from ``thresholds``
    (:class:`HeadThresholds`, defaults in brackets):

    1. ``dead`` -- ``fixed_mass >= dead_mass`` [0.8] or ``special_mass >= dead_mass``:
       nearly all mass parked on one fixed position (first token, [CLS], [SEP]); such
       heads often act as a no-op (Clark et al. 2019).
    2. ``uniform`` -- mean normalised entropy ``>= uniform_entropy`` [0.9]: a bag-of-keys average.
    3. ``positional-previous`` / ``positional-next`` / ``positional-self`` -- the largest of
       the three positional masses is ``>= positional_mass`` [0.5].
    4. ``content`` -- none of the above: where the mass goes depends on the content.

    A head whose every row is fully masked is labelled ``dead`` with NaN numbers.
    Classification needs several queries per sequence: with L = 1 every head looks fixed.

    Args:
        attentions: per-layer (B, H, L, S) weights (heads may differ per layer), or one
            (layers, B, H, L, S) tensor.
        key_mask: bool (B, S) padding mask or 4-D mask broadcastable to (B, H, L, S); it
            sets the entropy normaliser (pass the causal mask for decoders) and which
            positional targets count.
        query_mask: bool (B, L); False rows (padded queries) are left out of every mean.
        special_keys: bool (B, S) marking [CLS]/[SEP]-like keys for ``special_mass``.
        offset: query i sits at key position ``i + offset`` (see :func:`mean_attention_distance`).
        thresholds: a :class:`HeadThresholds`; None for the defaults.

    Returns:
        a :class:`HeadSummary` with one :class:`HeadStats` per (layer, head).
    """
    layers = _stack_layers(attentions)
    thresholds = HeadThresholds() if thresholds is None else thresholds
    if not isinstance(thresholds, HeadThresholds):
        raise TypeError(f"thresholds must be a HeadThresholds; got {type(thresholds).__name__}")
    _check_int(offset, "offset")
    B, _, L, S = layers[0].shape
    if query_mask is not None:
        if not isinstance(query_mask, Tensor) or query_mask.dtype != torch.bool:
            raise TypeError("query_mask must be a bool tensor of shape (B, L); True = real query")
        if tuple(query_mask.shape) != (B, L):
            raise ValueError(f"query_mask must have shape (B, L) = ({B}, {L}); got {tuple(query_mask.shape)}")

    stats: list[HeadStats] = []
    for li, w in enumerate(layers):
        w = w.detach().to(torch.float64)  # means over many rows: keep them exact
        mask = expand_key_mask(key_mask, w)
        valid = w.sum(-1) > 0.5  # (B, H, L): rows that put mass anywhere
        if query_mask is not None:
            valid = valid & query_mask[:, None, :].to(w.device)

        ent = _head_mean(normalized_entropy(w, key_mask), valid)
        mx = _head_mean(max_weight(w), valid)
        dist = _head_mean(mean_attention_distance(w, offset), valid)
        sink = _head_mean(sink_mass(w, 0), valid)
        prev, nxt, own = (_positional_head_mean(w, valid, mask, offset + d) for d in (-1, 1, 0))
        special = _head_mean(sink_mass(w, special_keys), valid) if special_keys is not None else None

        # Column means per sequence: how much of every row goes to the same key j.
        vf = valid.to(w.dtype)
        rows = vf.sum(-1)  # (B, H)
        col = (w * vf[..., None]).sum(-2) / rows.clamp(min=1)[..., None]  # (B, H, S)
        col_max, col_arg = col.max(-1)  # (B, H)
        has_rows = rows > 0
        fixed = (col_max * has_rows).sum(0) / has_rows.sum(0).clamp(min=1)
        fixed = torch.where(has_rows.any(0), fixed, torch.full_like(fixed, math.nan))

        for h in range(w.shape[1]):
            args = col_arg[:, h][has_rows[:, h]]
            position = int(torch.mode(args).values) if args.numel() else -1
            numbers = dict(
                entropy=float(ent[h]),
                max_weight=float(mx[h]),
                distance=float(dist[h]),
                sink_mass=float(sink[h]),
                previous_mass=float(prev[h]),
                next_mass=float(nxt[h]),
                self_mass=float(own[h]),
                fixed_mass=float(fixed[h]),
                fixed_position=position,
                special_mass=None if special is None else float(special[h]),
            )
            label, reason = thresholds.label(numbers)
            stats.append(HeadStats(layer=li, head=h, label=label, reason=reason, **numbers))
    return HeadSummary(stats=tuple(stats), thresholds=thresholds)
