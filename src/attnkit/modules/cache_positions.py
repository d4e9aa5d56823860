"""Masks and biases over a KV cache, evaluated at absolute token positions instead of slot indices.

Used by :mod:`attnkit.modules.cache` (public name ``attnkit.cache``). Under caching, slot s
of the cache need not hold position s: new queries sit at positions offset by what is already
cached, padded prompts are compacted per row, and a sliding-window ring buffer stores keys out of
order. So the causal / window / user masks and the positional biases (ALiBi, T5, Shaw) are
wrapped to see ``q_idx``, ``kv_idx`` = the absolute positions of query and key:

* :class:`PositionedMask` — a mask predicate evaluated at positions;
* :class:`PositionedBias` — a score modifier evaluated at positions (``pos_q - pos_k``);
* :func:`cache_mask` — builds the full mask for L queries over a
  :class:`~attnkit.modules.cache_base.CacheView`: None or the bottom-right causal mask on the
  unpadded, in-order fast paths, else key validity AND query validity AND the position masks.

Shape legend: B batch, L new tokens (queries), S cached slots (keys); positions are (B, L) for
queries and (B, S) for keys (a leading 1 broadcasts over the batch).
"""

from __future__ import annotations

import torch

from ..core import masks as M
from ..core.biases import ScoreModifier, TensorBias
from .cache_base import CacheView


# positions → masks and biases ------------------------------------------------------------------
def _take(pos: torch.Tensor, b: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """pos (B|1, N)[b, idx] by broadcasting: (B', 1, l, 1) or (B', 1, 1, s)."""
    return pos[b if pos.shape[0] > 1 else torch.zeros_like(b), idx]


def _check_positional_mask(m: M.Mask) -> None:
    if not m.positional:  # the mask kind says whether it reads positions only (Mask.positional)
        raise ValueError(
            f"with a cache, mask= is evaluated at absolute positions (q_idx, kv_idx = token positions), so it must be a "
            f"positional mask (causal, sliding_window, chunked, prefix_lm with an int, custom); got {m!r}, which indexes "
            f"by slot. Pass padding as attention_mask= (B, L) for the new tokens instead"
        )


class PositionedMask(M.Mask):
    """``inner`` evaluated with ``q_idx``/``kv_idx`` replaced by absolute positions."""

    def __init__(self, inner: M.Mask, q_pos: torch.Tensor, k_pos: torch.Tensor):
        _check_positional_mask(inner)
        self.inner, self.q_pos, self.k_pos = inner, q_pos, k_pos
        nb = max(q_pos.shape[0], k_pos.shape[0])
        self.dims = inner.dims | ({"b"} if nb > 1 else frozenset())
        self._nb = nb if nb > 1 else None

    @property
    def batch_size(self):
        return self._nb

    def predicate(self, L, S):
        # L = S = 1 makes every alignment offset 0: the inner mask compares positions directly
        f = self.inner.predicate(1, 1)
        return lambda b, h, q, kv: f(b, h, _take(self.q_pos, b, q), _take(self.k_pos, b, kv))

    def __repr__(self):
        return f"at_positions({self.inner!r})"


class PositionedBias(ScoreModifier):
    """``inner`` (ALiBi, T5, Shaw, custom) evaluated at absolute positions instead of indices."""

    def __init__(self, inner: ScoreModifier, q_pos: torch.Tensor, k_pos: torch.Tensor):
        super().__init__()
        parts = inner.leaves()
        for p in parts:
            if isinstance(p, TensorBias):
                raise TypeError(
                    "with a cache, bias= is evaluated at absolute positions; a dense bias tensor indexes cache slots, which "
                    "move (ring buffer, padding). Use a positional bias (ALiBi, T5, Shaw) or custom_bias(fn) of positions"
                )
        self.inner, self.q_pos, self.k_pos = inner, q_pos, k_pos
        nb = max(q_pos.shape[0], k_pos.shape[0])
        self.dims = inner.dims | ({"b"} if nb > 1 else frozenset())
        self.additive, self.num_heads = inner.additive, inner.num_heads

    def bias_fn(self, L, S):
        f = self.inner.bias_fn(1, 1)
        return lambda b, h, q, kv: f(b, h, _take(self.q_pos, b, q), _take(self.k_pos, b, kv))

    def score_mod(self, L, S):
        f = self.inner.score_mod(1, 1)
        return lambda s, b, h, q, kv: f(s, b, h, _take(self.q_pos, b, q), _take(self.k_pos, b, kv))


def cache_mask(
    view: CacheView,
    q_pos: torch.Tensor,
    q_valid: torch.Tensor | None,
    *,
    causal: bool,
    window: int | None = None,
    mask: M.Mask | None = None,
) -> M.Mask | None:
    """The mask for L queries at ``q_pos`` (B, L) over a cache view: None when nothing is masked.

    Unpadded rows with default positions take the fast paths: one query sees every slot (no mask),
    a prompt gets the bottom-right causal mask (SDPA's ``is_causal`` when L == S). Everything else
    ANDs key validity, query validity and the position masks.
    """
    L = q_pos.shape[1]
    simple = q_valid is None and view.valid is None and mask is None
    if simple and L == 1 and (view.all_visible or (not causal and window is None)):
        return None
    if simple and view.in_order and window is None:
        return M.causal("bottom_right") if causal else None
    parts = []
    if causal:
        parts.append(M.causal())
    if window is not None:
        parts.append(M.sliding_window(left=window - 1, right=None if not causal else 0))
    if mask is not None:
        parts.append(mask)
    out = None
    if parts:
        inner = parts[0]
        for p in parts[1:]:
            inner = inner & p
        out = PositionedMask(inner, q_pos, view.positions)
    if view.valid is not None:
        kp = M.KeyPaddingMask(view.valid)
        out = kp if out is None else out & kp
    if q_valid is not None and not bool(q_valid.all()):
        qv = q_valid
        qm = M.custom(lambda b, h, q, kv: qv[b, q], depends_on=("b",), name="query_valid")
        out = qm if out is None else out & qm
    return out
