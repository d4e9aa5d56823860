r"""Logit soft-capping: ``cap · tanh(score / cap)``, a smooth clamp of every score to (-cap, cap).

Gemma 2 (Gemma Team 2024, https://arxiv.org/abs/2408.00118) caps attention logits at 50 and
Grok-1 (xAI 2024, https://github.com/xai-org/grok-1) at 30: a logit far beyond the others can no
longer take a whole row, and the gradient ``1 - tanh²(score / cap)`` fades instead of stopping.
Near 0 the cap is the identity (``cap · tanh(x / cap) = x - x³ / (3 cap²) + …``).

Where it applies: to the scaled score plus every additive bias (ALiBi, T5, Shaw, a float tensor),
so the logit that enters the softmax is the capped one; masks are applied after it (a masked pair
is -inf whatever its capped score). In a list ``bias=[alibi, softcap(30)]`` the cap runs after the
other parts wherever it stands in the list (:func:`attnkit.core.biases.as_modifier`); this is
Gemma 2's order: scores · scale, then the cap, then the mask.

It is a score modifier, not an additive bias (``additive = False``): backends that take only a
dense float mask (SDPA) decline it; the reference and the blockwise tile loop apply it per tile,
forward and backward. Its cost per score element (divide, tanh, multiply) is what ``auto`` reads.

Shape legend: scores (B, H, L, S); the cap is one number for every head and pair.
"""

from __future__ import annotations

import math
import numbers

import torch

from .bias_base import ScoreModifier

__all__ = ["SoftCap", "softcap"]


class SoftCap(ScoreModifier):
    """``score → cap · tanh(score / cap)`` for a finite ``cap`` > 0."""

    additive = False
    final = True  # caps the whole logit: runs after the additive parts of a bias list
    dims = frozenset()  # the same for every batch row and head
    cost_per_element = 3.0  # divide, tanh, multiply

    def __init__(self, cap: float):
        super().__init__()
        if isinstance(cap, bool) or not isinstance(cap, numbers.Real):
            raise TypeError(f"softcap cap must be a positive finite real number, got {type(cap).__name__} ({cap!r}); e.g. softcap(50.0) as in Gemma 2")
        if not (math.isfinite(cap) and cap > 0):
            raise ValueError(
                f"softcap cap must be a positive finite number, got {cap}; cap · tanh(score / cap) needs cap > 0 "
                "(e.g. 50.0 as in Gemma 2, 30.0 as in Grok); for no capping leave it out"
            )
        self.cap = float(cap)

    def score_mod(self, L: int, S: int):
        cap = self.cap

        def fn(score, b, h, q, kv):
            wide = _wider(score.dtype, cap)
            if wide is not None:  # a cap the score's dtype cannot hold as a factor: one dtype up
                return (torch.tanh(score.to(wide) / cap) * cap).to(score.dtype)
            return torch.tanh(score / cap) * cap

        return fn

    def extra_repr(self) -> str:
        return f"cap={self.cap:g}"


def _wider(dtype: torch.dtype, cap: float) -> torch.dtype | None:
    """The dtype to cap ``dtype`` scores in when ``cap`` is too large for it, else None.

    ``cap`` is a Python float; in a float32 product it rounds to float32, and from 3.4028e38 on it is
    inf there: ``tanh(s / inf) · inf = 0 · inf = NaN`` where the answer is ``s`` (the cap is then
    the identity to rounding). Above ``sqrt(max)`` of the dtype the cap is computed one dtype wider
    (float32 → float64, half → float32); the result, at most ``|s|`` in size, fits back. Below that
    ``s / cap`` stays normal for every score above ``sqrt(max) · tiny`` (1e-19 in float32), so
    the cap costs nothing extra on sizes anyone uses (Gemma 2's 50)."""
    if not dtype.is_floating_point or dtype == torch.float64 or cap <= torch.finfo(dtype).max ** 0.5:
        return None
    return torch.float64 if dtype == torch.float32 else torch.float32


def softcap(cap: float) -> SoftCap:
    """Logit soft-capping ``cap · tanh(score / cap)`` (Gemma 2, Grok); pass it as ``bias=``, alone or
    in a list with position biases (the cap then applies to their sum)."""
    return SoftCap(cap)
