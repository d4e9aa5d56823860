"""FlexAttention's callables, taken as they are: a plain ``mask_mod`` as ``mask=``, a plain
``score_mod`` as ``bias=``.

PyTorch's FlexAttention (``torch.nn.attention.flex_attention``, https://pytorch.org/blog/flexattention/)
customises attention with two small functions:

* ``mask_mod(b, h, q_idx, kv_idx) -> bool`` — may query ``q_idx`` attend key ``kv_idx``;
* ``score_mod(score, b, h, q_idx, kv_idx) -> score`` — change the (scaled) score of the pair.

attnkit calls the same functions, by broadcasting instead of ``vmap``: ``b`` (B', 1, 1, 1),
``h`` (1, H', 1, 1), ``q_idx`` (1, 1, l, 1), ``kv_idx`` (1, 1, 1, s) and ``score`` (B, H, l, s)
(:mod:`attnkit.core.indices`). Any function FlexAttention accepts that uses tensor operations
(comparisons, ``&`` / ``|``, ``torch.where``, arithmetic, indexing captured tensors with the index
arguments) therefore works unchanged; Python ``if`` / ``and`` on the arguments works in neither.

How a plain function is read — **the number of required positional parameters decides**:

=========  ==================  =====================================================================
passed as  required positional  becomes
=========  ==================  =====================================================================
mask=      4                   :func:`attnkit.masks.custom` (a mask predicate, FlexAttention's mask_mod)
bias=      5                   :func:`attnkit.biases.score_mod` (FlexAttention's score_mod)
bias=      4                   :func:`attnkit.biases.custom_bias` (an additive bias ``(b, h, q, kv)``)
=========  ==================  =====================================================================

Parameters with defaults (``def mod(score, b, h, q, kv, cap=30.0)``) do not count. Anything else
(``*args``, a builtin without a signature, another count) is a ``TypeError`` naming the markers
that say it explicitly: wrap the function in ``masks.custom``, ``biases.score_mod`` or
``biases.custom_bias``. Those wrappers also take ``depends_on`` and ``name``.

A plain mask_mod also gets tile skipping like the built-in masks: its tile states are computed
once per shape by evaluating it on the tile grid (:mod:`attnkit.core.tile_map`), and on CPU the
blockwise backend keeps the additive masks of its partly masked tiles per shape too
(:mod:`attnkit.backends.blockwise.kernel.segment_masks`), keyed by a snapshot of what it reads (closure
cells, globals, a bound object, tensor contents: :mod:`attnkit.core.cache_keys`), so a changed
capture is seen; it must still be pure in its indices. Whether it reads ``b`` or ``h`` is read off its result's shape on the first call (a result
of size 1 along an index axis does not depend on that index), as FlexAttention's ``B=None`` /
``H=None`` broadcast; a function that reduces over an index tensor (``b.max()``) must declare
``depends_on`` with :func:`attnkit.masks.custom`.

Shape legend: B batch, H heads, L queries, S keys; l, s one tile's queries and keys.
"""

from __future__ import annotations

import inspect
from typing import Callable

from torch import nn

__all__ = ["required_positional", "mask_from_callable", "bias_from_callable"]

_MASK_SIG = "mask_mod(b, h, q_idx, kv_idx) -> bool"
_SCORE_SIG = "score_mod(score, b, h, q_idx, kv_idx) -> score"
_BIAS_SIG = "bias(b, h, q_idx, kv_idx) -> tensor"


def required_positional(fn: Callable) -> int | None:
    """How many positional parameters ``fn`` requires, or None when that cannot be told (``*args``,
    no signature). An ``nn.Module`` is read through its ``forward``."""
    target = fn.forward if isinstance(fn, nn.Module) else fn
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):  # builtins and some C callables have no signature
        return None
    n = 0
    for p in sig.parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            return None
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty:
            n += 1
        elif p.kind is p.KEYWORD_ONLY and p.default is p.empty:
            return None  # a required keyword argument: neither signature
    return n


def _describe(fn: Callable, n: int | None) -> str:
    name = getattr(fn, "__name__", type(fn).__name__)
    return f"{name!r} with {'an unknown number of' if n is None else n} required positional parameter{'' if n == 1 else 's'}"


def mask_from_callable(fn: Callable):
    """A plain ``mask_mod(b, h, q_idx, kv_idx) -> bool`` as a :class:`~attnkit.core.masks.Mask`
    whose batch / head dependence is found on its first call."""
    from .mask_values import CustomMask

    n = required_positional(fn)
    if n == 4:
        return CustomMask(fn)
    if n == 5:
        raise TypeError(
            f"mask got {_describe(fn, n)}, which reads as a {_SCORE_SIG}; pass it as bias=, "
            f"or for a mask give it the signature {_MASK_SIG}"
        )
    raise TypeError(
        f"mask must be an attnkit Mask, a bool tensor or a {_MASK_SIG}, got a callable {_describe(fn, n)}; "
        "wrap it as attnkit.masks.custom(fn) if it takes (b, h, q_idx, kv_idx) in another form"
    )


def bias_from_callable(fn: Callable):
    """A plain ``score_mod`` (5 required positional parameters) or additive bias (4) as a score modifier."""
    from .biases import CustomBias, ScoreMod

    n = required_positional(fn)
    if n == 5:
        return ScoreMod(fn)
    if n == 4:
        return CustomBias(fn)
    raise TypeError(
        f"bias got a callable {_describe(fn, n)}; a plain function is read by its required positional parameters: "
        f"5 as a {_SCORE_SIG}, 4 as an additive {_BIAS_SIG}. Give it one of those signatures or wrap it as "
        "attnkit.biases.score_mod(fn) or attnkit.biases.custom_bias(fn)"
    )
