"""Per-row attention metrics on dense weights: entropy, peakiness, distance, sinks, positional mass.

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
labelled ``content`` is only "not explained by the simple patterns of
:func:`classify_heads`". Use ablation (:func:`attnkit.inspect.rollout.head_importance`)
for questions about importance.

Shape legend:
    B: batch size      H: heads
    L: queries         S: keys
    weights: (B, H, L, S), each row summing to 1, or to 0 on a fully masked row; with attention
    sinks (:mod:`attnkit.core.sinks`) to sigmoid(lse - sink) < 1, and every metric here is then
    a sum or maximum over the keys only (the sink's share is in none of them).

The diagnostics API is :mod:`attnkit.inspect.metrics`, which re-exports these functions with
the row summaries (:mod:`attnkit.inspect.row_summary`) and the head classification
(:mod:`attnkit.inspect.head_summary`) that build on them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = [
    "check_weights",
    "expand_key_mask",
    "normalized_entropy",
    "max_weight",
    "mean_attention_distance",
    "sink_mass",
    "previous_token_mass",
    "next_token_mass",
    "self_mass",
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


# ------------------------------------------------------------------ re-exports
