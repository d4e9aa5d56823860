"""Composable attention masks with one polarity: ``True`` means *may attend*.

Every mask is a predicate ``(b, h, q_idx, kv_idx) -> bool`` evaluated by broadcasting (see
:mod:`attnkit.core.indices`), in the style of FlexAttention's ``mask_mod``. Masks compose with
``&``, ``|`` and ``~``; :meth:`Mask.materialize` turns one into a dense bool tensor, and
:meth:`Mask.tile_state` says whether a (query-block, key-block) tile is empty, full or partial so a
blockwise backend can skip work without building the (L, S) matrix.

Conventions from other libraries differ in polarity; convert them with the named functions:
``from_attention_mask`` (Hugging Face 0/1, 1 = keep) and ``from_key_padding_mask``
(``torch.nn.MultiheadAttention``, True = ignore).

Shape legend: B batch, H heads, L queries, S keys.
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch

from .checks import require_choice, require_positive_int
from .indices import alignment_offset, index_grid
from .tiles import TileState

Predicate = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
ALIGNS = ("top_left", "bottom_right")


class Mask:
    """Base class. Subclasses implement :meth:`predicate` and may implement :meth:`_tile`.

    ``dims`` names the index dimensions the mask depends on (``"b"``, ``"h"``), so a materialized
    mask is (B or 1, H or 1, L, S) and no bigger than it must be.
    """

    dims: frozenset[str] = frozenset()

    def predicate(self, L: int, S: int) -> Predicate:  # pragma: no cover - abstract
        raise NotImplementedError

    def _tile(self, q0: int, q1: int, k0: int, k1: int, L: int, S: int) -> TileState | None:
        """Analytic tile state, or None when the tile must be evaluated."""
        return None

    @property
    def batch_size(self) -> int | None:
        """The batch size this mask was built for, or None if it holds no per-sequence data."""
        return None

    @property
    def num_heads(self) -> int | None:
        """The head count this mask holds data for (a per-head tensor), or None."""
        return None

    # composition -------------------------------------------------------------------------------
    def __and__(self, other: "Mask") -> "Mask":
        return AndMask(self, _as_mask(other, "other"))

    def __or__(self, other: "Mask") -> "Mask":
        return OrMask(self, _as_mask(other, "other"))

    def __invert__(self) -> "Mask":
        return NotMask(self)

    # evaluation --------------------------------------------------------------------------------
    def materialize(
        self,
        L: int,
        S: int,
        *,
        batch: int | None = None,
        heads: int | None = None,
        device: torch.device | str | None = None,
    ) -> torch.Tensor:
        """Dense bool tensor (B or 1, H or 1, L, S); True = may attend."""
        require_positive_int("L", L)
        require_positive_int("S", S)
        return self.evaluate((0, L), (0, S), L, S, batch=batch, heads=heads, device=device)

    def evaluate(
        self,
        q_range: tuple[int, int],
        kv_range: tuple[int, int],
        L: int,
        S: int,
        *,
        batch: int | None = None,
        heads: int | None = None,
        device: torch.device | str | None = None,
    ) -> torch.Tensor:
        """The mask on one tile: bool (B or 1, H or 1, q1-q0, k1-k0)."""
        nb = (batch or self.batch_size or 1) if "b" in self.dims else 1
        nh = (heads or self.num_heads or 1) if "h" in self.dims else 1
        g = index_grid(q_range, kv_range, batch=nb, heads=nh, device=device)
        out = torch.as_tensor(self.predicate(L, S)(g.b, g.h, g.q, g.kv), device=g.q.device)
        if out.dtype != torch.bool:
            raise TypeError(f"mask predicate must return a bool tensor, got {out.dtype}; compare with >=, == etc.")
        shape = (nb, nh, q_range[1] - q_range[0], kv_range[1] - kv_range[0])
        return out.expand(shape)

    def tile_state(
        self,
        q_range: tuple[int, int],
        kv_range: tuple[int, int],
        L: int,
        S: int,
        *,
        batch: int | None = None,
        heads: int | None = None,
        device: torch.device | str | None = None,
    ) -> TileState:
        """Is tile ``q_range`` × ``kv_range`` empty, full or partial (across all batch rows and heads)?"""
        state = self._tile(q_range[0], q_range[1], kv_range[0], kv_range[1], L, S)
        if state is not None:
            return state
        tile = self.evaluate(q_range, kv_range, L, S, batch=batch, heads=heads, device=device)
        if bool(tile.all()):
            return TileState.FULL
        if not bool(tile.any()):
            return TileState.EMPTY
        return TileState.PARTIAL

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _as_mask(m: object, name: str) -> Mask:
    if isinstance(m, Mask):
        return m
    if isinstance(m, torch.Tensor):
        return TensorMask(m)
    if callable(m):
        return CustomMask(m)
    raise TypeError(f"{name} must be an attnkit Mask, a bool tensor or a predicate (b, h, q_idx, kv_idx) -> bool, got {type(m).__name__}")


# combinators ------------------------------------------------------------------------------------
class _Combined(Mask):
    def __init__(self, *parts: Mask):
        self.parts = parts
        self.dims = frozenset().union(*(p.dims for p in parts))

    @property
    def batch_size(self) -> int | None:
        sizes = {p.batch_size for p in self.parts} - {None}
        if len(sizes) > 1:
            raise ValueError(f"combined masks were built for different batch sizes {sorted(sizes)}; build them for the same batch")
        return sizes.pop() if sizes else None

    @property
    def num_heads(self) -> int | None:
        return max((p.num_heads for p in self.parts if p.num_heads is not None), default=None)

    def __repr__(self) -> str:
        sep = {"AndMask": " & ", "OrMask": " | "}[type(self).__name__]
        return "(" + sep.join(repr(p) for p in self.parts) + ")"


class AndMask(_Combined):
    def predicate(self, L, S):
        fns = [p.predicate(L, S) for p in self.parts]
        return lambda b, h, q, kv: _reduce(fns, b, h, q, kv, torch.logical_and)

    def _tile(self, q0, q1, k0, k1, L, S):
        states = [p._tile(q0, q1, k0, k1, L, S) for p in self.parts]
        if TileState.EMPTY in states:
            return TileState.EMPTY
        if all(s is TileState.FULL for s in states):
            return TileState.FULL
        if None in states:
            return None
        if sum(s is TileState.PARTIAL for s in states) > 1:
            return None  # two partial tiles may not overlap at all (causal & ~causal): evaluate
        return TileState.PARTIAL


class OrMask(_Combined):
    def predicate(self, L, S):
        fns = [p.predicate(L, S) for p in self.parts]
        return lambda b, h, q, kv: _reduce(fns, b, h, q, kv, torch.logical_or)

    def _tile(self, q0, q1, k0, k1, L, S):
        states = [p._tile(q0, q1, k0, k1, L, S) for p in self.parts]
        if TileState.FULL in states:
            return TileState.FULL
        if all(s is TileState.EMPTY for s in states):
            return TileState.EMPTY
        return None  # two partial tiles may still cover the tile together: evaluate


def _reduce(fns: list[Predicate], b, h, q, kv, op) -> torch.Tensor:
    out = torch.as_tensor(fns[0](b, h, q, kv))
    for fn in fns[1:]:
        out = op(out, fn(b, h, q, kv))
    return out


class NotMask(Mask):
    def __init__(self, inner: Mask):
        self.inner = inner
        self.dims = inner.dims

    @property
    def batch_size(self):
        return self.inner.batch_size

    @property
    def num_heads(self):
        return self.inner.num_heads

    def predicate(self, L, S):
        fn = self.inner.predicate(L, S)
        return lambda b, h, q, kv: torch.logical_not(fn(b, h, q, kv))

    def _tile(self, q0, q1, k0, k1, L, S):
        s = self.inner._tile(q0, q1, k0, k1, L, S)
        return None if s is None else ~s

    def __repr__(self):
        return f"~{self.inner!r}"


# positional masks -------------------------------------------------------------------------------
class CausalMask(Mask):
    """Query at absolute position p may attend keys at positions <= p.

    ``align="bottom_right"`` (default; FlashAttention and decoding): the last query is aligned with
    the last key, so with L < S the queries are the *newest* S - L + 1 .. S positions.
    ``align="top_left"`` (SDPA's ``is_causal``): query i is position i, so one query against five
    cached keys sees only key 0. The two agree when L == S.
    """

    def __init__(self, align: str = "bottom_right"):
        self.align = require_choice("align", align, ALIGNS)

    def predicate(self, L, S):
        off = alignment_offset(self.align, L, S)
        return lambda b, h, q, kv: kv <= q + off

    def _tile(self, q0, q1, k0, k1, L, S):
        off = alignment_offset(self.align, L, S)
        if k1 - 1 <= q0 + off:
            return TileState.FULL
        if k0 > q1 - 1 + off:
            return TileState.EMPTY
        return TileState.PARTIAL

    def __repr__(self):
        return f"causal(align={self.align!r})"


class SlidingWindowMask(Mask):
    """Query at position p may attend keys in ``[p - left, p + right]`` (None = unbounded side).

    ``sliding_window(left=w - 1, right=0)`` is the causal window of the last ``w`` tokens.
    """

    def __init__(self, left: int | None, right: int | None, align: str = "bottom_right"):
        for name, v in (("left", left), ("right", right)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise ValueError(f"{name} must be a non-negative int or None (unbounded), got {v!r}")
        if left is None and right is None:
            raise ValueError("sliding_window needs left or right set; with both None it masks nothing, so pass mask=None")
        self.left, self.right = left, right
        self.align = require_choice("align", align, ALIGNS)

    def predicate(self, L, S):
        off = alignment_offset(self.align, L, S)
        lo, hi = self.left, self.right

        def fn(b, h, q, kv):
            p = q + off
            ok = torch.ones_like(kv - p, dtype=torch.bool)
            if lo is not None:
                ok = ok & (kv >= p - lo)
            if hi is not None:
                ok = ok & (kv <= p + hi)
            return ok

        return fn

    def _tile(self, q0, q1, k0, k1, L, S):
        off = alignment_offset(self.align, L, S)
        p0, p1 = q0 + off, q1 - 1 + off
        lo = self.left if self.left is not None else float("inf")
        hi = self.right if self.right is not None else float("inf")
        if k1 - 1 < p0 - lo or k0 > p1 + hi:
            return TileState.EMPTY
        if k0 >= p1 - lo and k1 - 1 <= p0 + hi:
            return TileState.FULL
        return TileState.PARTIAL

    def __repr__(self):
        return f"sliding_window(left={self.left}, right={self.right}, align={self.align!r})"


class KeyPrefixMask(Mask):
    """Every query may attend the first ``prefix`` keys (the prefix of a prefix-LM)."""

    def __init__(self, prefix: int | torch.Tensor):
        self.prefix = prefix
        if isinstance(prefix, torch.Tensor):
            if prefix.dim() != 1 or prefix.dtype.is_floating_point or prefix.dtype == torch.bool:
                raise ValueError(f"prefix_len must be an int or a 1-D integer tensor (B,), got {prefix.dtype} shape {tuple(prefix.shape)}")
            self.dims = frozenset({"b"})
        elif isinstance(prefix, bool) or not isinstance(prefix, int) or prefix < 0:
            raise ValueError(f"prefix_len must be a non-negative int or a (B,) tensor, got {prefix!r}")

    @property
    def batch_size(self):
        return self.prefix.shape[0] if isinstance(self.prefix, torch.Tensor) else None

    def predicate(self, L, S):
        if isinstance(self.prefix, torch.Tensor):
            return lambda b, h, q, kv: kv < self.prefix.to(kv.device)[b]
        return lambda b, h, q, kv: kv < self.prefix

    def _tile(self, q0, q1, k0, k1, L, S):
        if isinstance(self.prefix, torch.Tensor):
            lo, hi = int(self.prefix.min()), int(self.prefix.max())
        else:
            lo = hi = self.prefix
        if k1 - 1 < lo:
            return TileState.FULL
        if k0 >= hi:
            return TileState.EMPTY
        return TileState.PARTIAL

    def __repr__(self):
        return f"KeyPrefixMask({self.prefix!r})"


# per-sequence masks -----------------------------------------------------------------------------
class KeyPaddingMask(Mask):
    """Per-sequence key validity, held as a bool (B, S) tensor: True = real token, may be attended."""

    dims = frozenset({"b"})

    def __init__(self, valid: torch.Tensor):
        if not isinstance(valid, torch.Tensor) or valid.dtype != torch.bool or valid.dim() != 2:
            raise TypeError("KeyPaddingMask needs a bool (B, S) tensor; build it with padding_mask(lengths=...) or from_attention_mask(...)")
        self.valid = valid

    @property
    def batch_size(self):
        return self.valid.shape[0]

    def predicate(self, L, S):
        if self.valid.shape[1] != S:
            raise ValueError(f"padding mask covers {self.valid.shape[1]} keys but the call has S={S} keys; build it for the key length")
        return lambda b, h, q, kv: self.valid.to(kv.device)[b, kv]

    def _tile(self, q0, q1, k0, k1, L, S):
        cols = self.valid[:, k0:k1]
        if bool(cols.all()):
            return TileState.FULL
        if not bool(cols.any()):
            return TileState.EMPTY
        return TileState.PARTIAL

    def __repr__(self):
        return f"KeyPaddingMask(B={self.valid.shape[0]}, S={self.valid.shape[1]})"


class DocumentMask(Mask):
    """Block-diagonal mask: a query may attend a key only within the same document id.

    ``doc_ids`` is (S,) or (B, S) of ints (packed sequences); queries use ``q_doc_ids`` if given,
    else the same ids (self-attention, L == S).
    """

    def __init__(self, doc_ids: torch.Tensor, q_doc_ids: torch.Tensor | None = None):
        for name, t in (("doc_ids", doc_ids), ("q_doc_ids", q_doc_ids)):
            if t is None:
                continue
            if not isinstance(t, torch.Tensor) or t.dtype.is_floating_point or t.dtype == torch.bool or t.dim() not in (1, 2):
                raise TypeError(f"{name} must be an integer tensor of shape (S,) or (B, S), got {getattr(t, 'dtype', type(t))} {tuple(getattr(t, 'shape', ()))}")
        self.kv_ids = doc_ids if doc_ids.dim() == 2 else doc_ids.unsqueeze(0)
        qi = doc_ids if q_doc_ids is None else q_doc_ids
        self.q_ids = qi if qi.dim() == 2 else qi.unsqueeze(0)
        self.dims = frozenset({"b"}) if max(self.kv_ids.shape[0], self.q_ids.shape[0]) > 1 else frozenset()

    @property
    def batch_size(self):
        n = max(self.kv_ids.shape[0], self.q_ids.shape[0])
        return n if n > 1 else None

    def predicate(self, L, S):
        if self.kv_ids.shape[1] != S or self.q_ids.shape[1] != L:
            raise ValueError(f"document ids cover L={self.q_ids.shape[1]}, S={self.kv_ids.shape[1]} but the call has L={L}, S={S}")

        def fn(b, h, q, kv):
            kvi = self.kv_ids.to(kv.device)
            qi = self.q_ids.to(kv.device)
            bq = b if qi.shape[0] > 1 else torch.zeros_like(b)
            bk = b if kvi.shape[0] > 1 else torch.zeros_like(b)
            return qi[bq, q] == kvi[bk, kv]

        return fn

    def _tile(self, q0, q1, k0, k1, L, S):
        qi, ki = self.q_ids[:, q0:q1], self.kv_ids[:, k0:k1]
        # documents are usually contiguous runs: disjoint id ranges prove the tile empty
        if qi.shape[0] == ki.shape[0] == 1:
            if int(qi.max()) < int(ki.min()) or int(ki.max()) < int(qi.min()):
                return TileState.EMPTY
            if int(qi.min()) == int(qi.max()) == int(ki.min()) == int(ki.max()):
                return TileState.FULL
        return None

    def __repr__(self):
        return f"DocumentMask(S={self.kv_ids.shape[1]})"


class TensorMask(Mask):
    """A user-supplied dense bool tensor broadcastable to (B, H, L, S); True = may attend."""

    def __init__(self, t: torch.Tensor):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.bool:
            dt = getattr(t, "dtype", type(t).__name__)
            raise TypeError(
                f"mask tensor must be bool with True = may attend, got {dt}; for a 0/1 Hugging Face mask use "
                "attnkit.masks.from_attention_mask, for an additive float mask pass it as bias="
            )
        if t.dim() > 4 or t.dim() < 2:
            raise ValueError(f"mask tensor must have 2 to 4 dims broadcastable to (B, H, L, S), got shape {tuple(t.shape)}")
        self.t = t.reshape((1,) * (4 - t.dim()) + tuple(t.shape))
        self.dims = frozenset(d for d, n in zip("bh", self.t.shape[:2]) if n > 1)

    @property
    def batch_size(self):
        return self.t.shape[0] if self.t.shape[0] > 1 else None

    @property
    def num_heads(self):
        return self.t.shape[1] if self.t.shape[1] > 1 else None

    def predicate(self, L, S):
        if self.t.shape[2] not in (1, L) or self.t.shape[3] not in (1, S):
            raise ValueError(f"mask of shape {tuple(self.t.shape)} is not broadcastable to (B, H, L={L}, S={S})")
        t = self.t

        def fn(b, h, q, kv):
            tt = t.to(kv.device)
            return tt[
                b if tt.shape[0] > 1 else torch.zeros_like(b),
                h if tt.shape[1] > 1 else torch.zeros_like(h),
                q if tt.shape[2] > 1 else torch.zeros_like(q),
                kv if tt.shape[3] > 1 else torch.zeros_like(kv),
            ]

        return fn

    def __repr__(self):
        return f"TensorMask(shape={tuple(self.t.shape)})"


class CustomMask(Mask):
    """Any predicate ``(b, h, q_idx, kv_idx) -> bool tensor``.

    By default it is evaluated for every batch row and head (correct for any predicate); declare
    ``depends_on=()`` when it uses neither ``b`` nor ``h`` to keep materialized masks (1, 1, L, S).
    """

    def __init__(self, fn: Predicate, depends_on: Iterable[str] = ("b", "h"), name: str | None = None):
        if not callable(fn):
            raise TypeError(f"custom mask needs a callable (b, h, q_idx, kv_idx) -> bool, got {type(fn).__name__}")
        dims = frozenset(depends_on)
        if not dims <= {"b", "h"}:
            raise ValueError(f"depends_on may name only 'b' and 'h', got {sorted(dims)}")
        self.fn, self.dims, self.name = fn, dims, name or getattr(fn, "__name__", "custom")

    def predicate(self, L, S):
        fn = self.fn

        def checked(b, h, q, kv):
            # checked here, not only in evaluate(), so backends that call predicates on tiles
            # directly get the same TypeError instead of a masked_fill error deep inside
            out = torch.as_tensor(fn(b, h, q, kv))
            if out.dtype != torch.bool:
                raise TypeError(f"mask predicate {self.name} must return a bool tensor, got {out.dtype}; compare with >=, == etc.")
            return out

        return checked

    def __repr__(self):
        return f"custom({self.name})"


# constructors (the public vocabulary) ------------------------------------------------------------
def causal(align: str = "bottom_right") -> Mask:
    return CausalMask(align)


def sliding_window(left: int | None = None, right: int | None = 0, align: str = "bottom_right") -> Mask:
    return SlidingWindowMask(left, right, align)


def padding_mask(lengths: torch.Tensor | list[int], max_len: int, *, side: str = "right") -> Mask:
    """Keys ``>= lengths[b]`` are padding (``side="right"``), or the first ``max_len - lengths[b]`` (left)."""
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1 or lengths.dtype.is_floating_point:
        raise ValueError(f"lengths must be a 1-D integer tensor (B,), got {lengths.dtype} shape {tuple(lengths.shape)}")
    if bool((lengths < 0).any()) or bool((lengths > max_len).any()):
        raise ValueError(f"lengths must lie in [0, max_len={max_len}], got {lengths.tolist()}")
    require_choice("side", side, ("left", "right"))
    pos = torch.arange(max_len, device=lengths.device)
    valid = pos[None, :] < lengths[:, None] if side == "right" else pos[None, :] >= (max_len - lengths)[:, None]
    return KeyPaddingMask(valid)


def from_attention_mask(attention_mask: torch.Tensor) -> Mask:
    """Hugging Face convention: (B, S) with 1 = real token, 0 = padding."""
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 2:
        raise ValueError(f"attention_mask must be a (B, S) tensor of 0/1, got {tuple(getattr(attention_mask, 'shape', ()))}")
    if attention_mask.dtype != torch.bool and not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
        raise ValueError("attention_mask must hold only 0 and 1 (1 = real token); for additive float masks pass bias=")
    return KeyPaddingMask(attention_mask.bool())


def from_key_padding_mask(key_padding_mask: torch.Tensor) -> Mask:
    """``torch.nn.MultiheadAttention`` convention: (B, S) bool with True = padding, ignore."""
    if not isinstance(key_padding_mask, torch.Tensor) or key_padding_mask.dim() != 2 or key_padding_mask.dtype != torch.bool:
        raise ValueError(
            f"key_padding_mask must be a bool (B, S) tensor with True = ignore, got {getattr(key_padding_mask, 'dtype', type(key_padding_mask).__name__)} "
            f"{tuple(getattr(key_padding_mask, 'shape', ()))}"
        )
    return KeyPaddingMask(~key_padding_mask)


def document(doc_ids: torch.Tensor, q_doc_ids: torch.Tensor | None = None) -> Mask:
    return DocumentMask(doc_ids, q_doc_ids)


def prefix_lm(prefix_len: int | torch.Tensor, align: str = "bottom_right") -> Mask:
    """Bidirectional over the first ``prefix_len`` keys, causal after them."""
    return KeyPrefixMask(prefix_len) | CausalMask(align)


def custom(fn: Predicate, depends_on: Iterable[str] = ("b", "h"), name: str | None = None) -> Mask:
    return CustomMask(fn, depends_on, name)


def as_mask(m: object) -> Mask | None:
    """Normalise what users pass as ``mask=``: None, a Mask, a bool tensor or a predicate."""
    return None if m is None else _as_mask(m, "mask")
