"""The base of every score modifier: :class:`ScoreModifier`, ``(score, b, h, q_idx, kv_idx) -> score``.

A modifier changes *how much* a pair attends, never *whether* (that is a mask's job). It is evaluated
by broadcasting on any tile (:meth:`ScoreModifier.apply`), so a blockwise backend never needs the
(L, S) matrix; an additive one (``score + bias(b, h, q_idx, kv_idx)``) can also be materialized as a
dense float tensor and handed to a fused kernel as its mask.

The modifiers (:mod:`.biases`: ALiBi, T5 and Shaw relative positions, custom functions, tensors,
sums; :mod:`.softcap`: logit soft-capping) subclass it; :mod:`attnkit.core.biases` is the public
vocabulary and imports them all.

Shape legend: B batch, H heads, L queries, S keys.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from .indices import index_grid

BiasFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
ScoreModFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class ScoreModifier(nn.Module):
    """Base class. Additive subclasses implement :meth:`bias_fn`; others override :meth:`score_mod`.

    A modifier describes itself to the cost model and the tile planner (nothing elsewhere reads
    its class): ``relative`` — its value depends only on (head, key position − query position),
    so tiles along one diagonal share it; ``cost_per_element`` — element-wise tensor passes per
    score element to evaluate it (a count, timed in :mod:`attnkit.core.cost`)."""

    dims: frozenset[str] = frozenset()
    additive: bool = True
    num_heads: int | None = None
    relative: bool = False
    cost_per_element: float = 8.0  # unknown code (custom biases, score_mods): a guess of a few ops
    final: bool = False  # transforms the whole logit (soft-capping): applied after the other parts of a list

    def leaves(self) -> tuple["ScoreModifier", ...]:
        """The modifiers this one is made of (itself, unless it combines several): what backends walk
        to find a modifier's own tensors without knowing which class combines them."""
        return (self,)

    def bias_fn(self, L: int, S: int) -> BiasFn:  # pragma: no cover - abstract
        raise NotImplementedError

    def score_mod(self, L: int, S: int) -> ScoreModFn:
        fn = self.bias_fn(L, S)
        return lambda score, b, h, q, kv: score + _in_dtype(fn(b, h, q, kv), score)

    def apply(
        self,
        scores: torch.Tensor,
        q_range: tuple[int, int],
        kv_range: tuple[int, int],
        L: int,
        S: int,
    ) -> torch.Tensor:
        """Modify a tile of scores (B, H, l, s) covering ``q_range`` × ``kv_range``."""
        B, H = scores.shape[:2]
        g = index_grid(q_range, kv_range, batch=B, heads=H, device=scores.device)
        return self.score_mod(L, S)(scores, g.b, g.h, g.q, g.kv)

    def materialize(
        self,
        L: int,
        S: int,
        *,
        batch: int | None = None,
        heads: int | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor:
        """Dense additive bias (B or 1, H or 1, L, S); only for additive modifiers.

        ``batch``/``heads`` default to the sizes the modifier was built for (``ALiBi(8)`` gives
        8 heads, not head 0 alone)."""
        if not self.additive:
            raise TypeError(f"{self!r} is not an additive bias and cannot be materialized; use a backend that applies score_mod per tile")
        nb = (batch or _natural_size(self, 0)) if "b" in self.dims else 1
        nh = (heads or _natural_size(self, 1)) if "h" in self.dims else 1
        g = index_grid((0, L), (0, S), batch=nb, heads=nh, device=device)
        # start from a (1, 1, 1, 1) zero of `dtype` (not 0-d: those don't take part in type promotion)
        # so summed parts add up in at least `dtype`, in the reference's order; a float32 sum of
        # float32 parts cast to float64 afterwards differed from the reference by ~1e-8
        zero = torch.zeros((1, 1, 1, 1), dtype=dtype, device=g.q.device)
        out = torch.as_tensor(self.score_mod(L, S)(zero, g.b, g.h, g.q, g.kv), device=g.q.device)
        return out.to(dtype).expand(nb, nh, L, S)


def _natural_size(mod: ScoreModifier, axis: int) -> int:
    """The batch (axis 0) or head (axis 1) count a modifier was built for, or 1 if it does not say."""
    t = getattr(mod, "t", None)
    sizes = [t.shape[axis]] if isinstance(t, torch.Tensor) else []
    if axis == 1 and mod.num_heads:
        sizes.append(mod.num_heads)
    sizes += [_natural_size(p, axis) for p in getattr(mod, "parts", ())]
    return max(sizes, default=1)


__all__ = ["BiasFn", "ScoreModFn", "ScoreModifier"]


def _in_dtype(out, score: torch.Tensor):
    """A bias function's result in the score's dtype: a float64 bias for float32 scores would
    otherwise make the whole row float64 (and ``weights @ v`` fail); ints become floats."""
    if isinstance(out, torch.Tensor) and out.dtype != score.dtype:
        return out.to(score.dtype)
    return out
