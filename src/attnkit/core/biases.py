"""Position biases and score modifiers: they change *how much* a pair attends, never *whether*.

A score modifier is ``(score, b, h, q_idx, kv_idx) -> score`` (FlexAttention's ``score_mod``),
evaluated by broadcasting on any tile, so a blockwise backend never needs the (L, S) matrix. Most
are additive biases ``score + bias(b, h, q_idx, kv_idx)``; only those can be handed to a fused
kernel as a dense float mask.

Query ``i`` sits at absolute position ``i + S - L`` (``align="bottom_right"``, the decoding
convention) or ``i`` (``"top_left"``); they agree when L == S.

* ALiBi — Press et al. 2022, https://arxiv.org/abs/2108.12409: ``-slope_h * |pos_q - pos_k|``.
* T5 relative buckets — Raffel et al. 2020, https://arxiv.org/abs/1910.10683: a learned scalar per
  head and log-spaced distance bucket.
* Shaw relative positions — Shaw et al. 2018, https://arxiv.org/abs/1803.02155: a learned scalar per
  head and clipped distance (the scalar form of their key-side relative embedding).
* Logit soft-capping ``cap · tanh(score / cap)`` (Gemma 2, Grok): :func:`softcap`, in :mod:`.softcap`.

In a list (``bias=[alibi, t5, softcap(50)]``) the parts apply in order, except that a part that
caps the whole logit (``final``: soft-capping) applies after all the others wherever it stands.

Shape legend: B batch, H heads, L queries, S keys.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import torch
from torch import nn

from .bias_base import BiasFn, ScoreModFn, ScoreModifier, _in_dtype
from .checks import require_choice, require_dense_rank, require_positive_int
from .indices import alignment_offset
from .mask_base import ALIGNS
from .softcap import SoftCap, softcap  # noqa: F401  (exported as attnkit.biases.softcap)

def _positions(align: str, L: int, S: int, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    """Relative distance ``pos_q - pos_k`` (positive = key in the past)."""
    return q + alignment_offset(align, L, S) - kv


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """The paper's head slopes: a geometric sequence from 2^(-8/n); for n not a power of two, the
    slopes of the nearest lower power of two followed by every other slope of the next power."""
    require_positive_int("num_heads", num_heads)

    def pow2(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    p = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = pow2(p)
    if p != num_heads:
        slopes += pow2(2 * p)[0::2][: num_heads - p]
    return torch.tensor(slopes, dtype=torch.float32)


class ALiBi(ScoreModifier):
    """``bias = -slope_h * |pos_q - pos_k|`` (equal to the paper's causal form for keys in the past)."""

    dims = frozenset({"h"})
    relative = True
    cost_per_element = 4.0  # subtract, abs, cast, multiply

    def __init__(self, num_heads: int, *, align: str = "bottom_right", slopes: torch.Tensor | None = None):
        super().__init__()
        self.num_heads = require_positive_int("num_heads", num_heads)
        self.align = require_choice("align", align, ALIGNS)
        if isinstance(slopes, nn.Parameter):  # learned slopes: a parameter of the module, in its own dtype
            s = slopes
        else:
            s = alibi_slopes(num_heads) if slopes is None else torch.as_tensor(slopes, dtype=torch.float32)
        if s.shape != (num_heads,):
            raise ValueError(f"slopes must have shape (num_heads,)=({num_heads},), got {tuple(s.shape)}")
        if isinstance(s, nn.Parameter):
            self.slopes = s  # listed by .parameters(), so optimizers and every backend see it
        else:
            self.register_buffer("slopes", s, persistent=False)

    def bias_fn(self, L, S):
        def fn(b, h, q, kv):
            dist = _positions(self.align, L, S, q, kv).abs().to(self.slopes.dtype)
            return -self.slopes.to(q.device)[h] * dist

        return fn

    def extra_repr(self):
        return f"num_heads={self.num_heads}, align={self.align!r}"


def _learned_table(rows: int, heads: int, device, dtype) -> torch.Tensor:
    """A (rows, heads) table drawn from N(0, 0.02²): an ``nn.Parameter``, except while
    ``torch.compile`` traces a function that builds the bias (Dynamo cannot construct parameters
    in a graph). Such a bias is rebuilt, with a fresh random table, at every call, as it is when
    the same function runs eagerly; build a bias you train once, outside the compiled function."""
    table = torch.empty(rows, heads, device=device, dtype=dtype)
    nn.init.normal_(table, std=0.02)
    return table if torch.compiler.is_compiling() else nn.Parameter(table)


def t5_bucket(relative_position: torch.Tensor, *, bidirectional: bool, num_buckets: int, max_distance: int) -> torch.Tensor:
    """T5's bucket of ``pos_k - pos_q``: exact for small distances, log-spaced up to ``max_distance``."""
    n = num_buckets
    ret = torch.zeros_like(relative_position)
    if bidirectional:
        n //= 2
        ret = ret + (relative_position > 0).long() * n
        dist = relative_position.abs()
    else:
        dist = (-relative_position).clamp(min=0)
    max_exact = n // 2
    is_small = dist < max_exact
    # clamp before log: log(0) is only taken where is_small already picked the exact bucket
    large = max_exact + (
        torch.log(dist.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact) * (n - max_exact)
    ).long()
    large = large.clamp(max=n - 1)
    return ret + torch.where(is_small, dist, large)


class T5RelativeBias(ScoreModifier):
    """Learned scalar per (bucket, head); bidirectional for encoders, causal for decoders."""

    dims = frozenset({"h"})
    relative = True
    cost_per_element = 14.0  # bucket: compare, abs, clamp, log, divide, round, clamp, where, gather

    def __init__(
        self,
        num_heads: int,
        *,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool = True,
        align: str = "bottom_right",
        device=None,
        dtype=None,
    ):
        super().__init__()
        self.num_heads = require_positive_int("num_heads", num_heads)
        require_positive_int("num_buckets", num_buckets)
        require_positive_int("max_distance", max_distance)
        if num_buckets < (4 if bidirectional else 2):
            raise ValueError(f"num_buckets must be >= {4 if bidirectional else 2}, got {num_buckets}")
        max_exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
        if max_distance <= max_exact:
            # log(max_distance / max_exact) <= 0 would turn far buckets into NaN casts (negative indices)
            raise ValueError(
                f"max_distance must exceed the {max_exact} exact-distance buckets of num_buckets={num_buckets}"
                f"{' (bidirectional)' if bidirectional else ''}, got max_distance={max_distance}; use max_distance > {max_exact}"
            )
        self.num_buckets, self.max_distance, self.bidirectional = num_buckets, max_distance, bidirectional
        self.align = require_choice("align", align, ALIGNS)
        self.table = _learned_table(num_buckets, num_heads, device, dtype)

    def bias_fn(self, L, S):
        def fn(b, h, q, kv):
            rel = -_positions(self.align, L, S, q, kv)  # T5 buckets pos_k - pos_q
            bucket = t5_bucket(rel, bidirectional=self.bidirectional, num_buckets=self.num_buckets, max_distance=self.max_distance)
            return self.table[bucket, h]

        return fn

    def extra_repr(self):
        return f"num_heads={self.num_heads}, num_buckets={self.num_buckets}, max_distance={self.max_distance}, bidirectional={self.bidirectional}"


class RelativePositionBias(ScoreModifier):
    """Shaw-style learned scalar per head for each clipped distance in ``[-max_distance, max_distance]``."""

    dims = frozenset({"h"})
    relative = True
    cost_per_element = 6.0  # subtract, clamp, offset, gather

    def __init__(self, num_heads: int, *, max_distance: int = 16, align: str = "bottom_right", device=None, dtype=None):
        super().__init__()
        self.num_heads = require_positive_int("num_heads", num_heads)
        self.max_distance = require_positive_int("max_distance", max_distance)
        self.align = require_choice("align", align, ALIGNS)
        self.table = _learned_table(2 * max_distance + 1, num_heads, device, dtype)

    def bias_fn(self, L, S):
        def fn(b, h, q, kv):
            rel = (-_positions(self.align, L, S, q, kv)).clamp(-self.max_distance, self.max_distance)
            return self.table[rel + self.max_distance, h]

        return fn

    def extra_repr(self):
        return f"num_heads={self.num_heads}, max_distance={self.max_distance}"


class CustomBias(ScoreModifier):
    """Additive bias from any ``(b, h, q_idx, kv_idx) -> tensor``; evaluated for every b and h
    unless ``depends_on`` says otherwise."""

    def __init__(self, fn: BiasFn, depends_on: Iterable[str] = ("b", "h"), name: str | None = None):
        super().__init__()
        if not callable(fn):
            raise TypeError(f"custom bias needs a callable (b, h, q_idx, kv_idx) -> tensor, got {type(fn).__name__}")
        self.fn, self.dims, self.name = fn, _dims(depends_on), name or getattr(fn, "__name__", "bias")

    def bias_fn(self, L, S):
        return self.fn

    def extra_repr(self):
        return self.name


class ScoreMod(ScoreModifier):
    """Any ``(score, b, h, q_idx, kv_idx) -> score`` (e.g. soft-capping). Not additive: fused kernels
    that take only a float mask cannot run it. A result that is a Python number, an int tensor, a
    tensor of another float dtype or one that only broadcasts to the tile becomes a score tile of
    the score's dtype and shape (a constant gives uniform weights), as under FlexAttention."""

    additive = False

    def __init__(self, fn: ScoreModFn, depends_on: Iterable[str] = ("b", "h"), name: str | None = None):
        super().__init__()
        if not callable(fn):
            raise TypeError(f"score_mod needs a callable (score, b, h, q_idx, kv_idx) -> score, got {type(fn).__name__}")
        self.fn, self.dims, self.name = fn, _dims(depends_on), name or getattr(fn, "__name__", "score_mod")

    def score_mod(self, L, S):
        fn = self.fn

        def checked(score, b, h, q, kv):
            out = fn(score, b, h, q, kv)
            if isinstance(out, torch.Tensor) and out.dtype == score.dtype and out.shape == score.shape:
                return out
            return _like_score(out, score)

        return checked

    def extra_repr(self):
        return self.name


def _like_score(out, score: torch.Tensor) -> torch.Tensor:
    """A score_mod's result as a new score tile (B, H, l, s) of the score's dtype: a Python number
    or a tensor that broadcasts to the tile (an int tensor, a (1, 1, l, s) one) is spread over it,
    as FlexAttention's vmap would; the copy is dense, since tiles are edited in place later."""
    if not isinstance(out, torch.Tensor):
        return torch.full_like(score, float(out))  # a constant: the score does not reach it (no gradient)
    return _in_dtype(out, score).expand_as(score).contiguous()


class TensorBias(ScoreModifier):
    """A dense additive float tensor broadcastable to (B, H, L, S)."""

    cost_per_element = 2.0  # gather and add

    def __init__(self, t: torch.Tensor):
        super().__init__()
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            raise TypeError(f"bias tensor must be floating point, got {getattr(t, 'dtype', type(t).__name__)}; boolean masks go to mask=")
        require_dense_rank("bias", t)  # 2-D or 4-D: a 3-D tensor reads as (B, L, S) or (H, L, S)
        self.t = t.reshape((1,) * (4 - t.dim()) + tuple(t.shape))
        self.dims = frozenset(d for d, n in zip("bh", self.t.shape[:2]) if n > 1)

    def bias_fn(self, L, S):
        if self.t.shape[2] not in (1, L) or self.t.shape[3] not in (1, S):
            raise ValueError(f"bias of shape {tuple(self.t.shape)} is not broadcastable to (B, H, L={L}, S={S})")
        t = self.t

        def fn(b, h, q, kv):
            z = torch.zeros_like
            return t.to(kv.device)[
                b if t.shape[0] > 1 else z(b), h if t.shape[1] > 1 else z(h),
                q if t.shape[2] > 1 else z(q), kv if t.shape[3] > 1 else z(kv),
            ]

        return fn


class SumOfModifiers(ScoreModifier):
    """Several modifiers applied in order (additive ones add up)."""

    def __init__(self, parts: Sequence[ScoreModifier]):
        super().__init__()
        self.parts = nn.ModuleList(parts)
        self.dims = frozenset().union(*(p.dims for p in parts))
        self.additive = all(p.additive for p in parts)
        heads = {p.num_heads for p in parts} - {None}
        if len(heads) > 1:
            raise ValueError(f"biases were built for different head counts {sorted(heads)}")
        self.num_heads = heads.pop() if heads else None

    @property
    def relative(self) -> bool:
        return all(p.relative for p in self.parts)

    @property
    def cost_per_element(self) -> float:
        return float(sum(p.cost_per_element for p in self.parts))

    def leaves(self):
        return tuple(leaf for p in self.parts for leaf in p.leaves())

    def bias_fn(self, L, S):
        fns = [p.bias_fn(L, S) for p in self.parts]
        return lambda b, h, q, kv: sum(f(b, h, q, kv) for f in fns)

    def score_mod(self, L, S):
        fns = [p.score_mod(L, S) for p in self.parts]

        def fn(score, b, h, q, kv):
            for f in fns:
                score = f(score, b, h, q, kv)
            return score

        return fn


def _dims(depends_on: Iterable[str]) -> frozenset[str]:
    dims = frozenset(depends_on)
    if not dims <= {"b", "h"}:
        raise ValueError(f"depends_on may name only 'b' and 'h', got {sorted(dims)}")
    return dims


def as_modifier(bias: object) -> ScoreModifier | None:
    """Normalise what users pass as ``bias=``: None, a modifier, a float tensor, a plain function
    (:mod:`attnkit.core.flex_callables`), or a list of them."""
    if bias is None or isinstance(bias, ScoreModifier):
        return bias
    if isinstance(bias, torch.Tensor):
        return TensorBias(bias)
    if isinstance(bias, (list, tuple)):
        parts = [p for p in (as_modifier(b) for b in bias) if p is not None]
        # a cap of the whole logit sees the sum of the position biases, wherever the user listed it
        return SumOfModifiers([p for p in parts if not p.final] + [p for p in parts if p.final])
    if callable(bias):  # FlexAttention's plain score_mod (5 arguments) or an additive bias (4)
        from .flex_callables import bias_from_callable

        return bias_from_callable(bias)
    raise TypeError(f"bias must be an attnkit bias, a float tensor or a list of them, got {type(bias).__name__}")


def custom_bias(fn: BiasFn, depends_on: Iterable[str] = ("b", "h"), name: str | None = None) -> CustomBias:
    return CustomBias(fn, depends_on, name)


def score_mod(fn: ScoreModFn, depends_on: Iterable[str] = ("b", "h"), name: str | None = None) -> ScoreMod:
    return ScoreMod(fn, depends_on, name)
