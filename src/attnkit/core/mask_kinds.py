"""The named masks: causal, sliding window, prefix-LM, document (block-diagonal), dense tensor
and custom predicate.

Each is a :class:`~attnkit.core.masks.Mask` subclass with a predicate ``(b, h, q_idx, kv_idx) ->
bool`` (True = may attend) and, where it can, an analytic ``_tile`` so blockwise backends skip
empty tiles without evaluating them; the lower-case functions at the bottom are the public
constructors. Positional masks take ``align`` (``"bottom_right"`` or ``"top_left"``), which places
the L queries against the S keys when L != S. Key padding and the conversions from other
libraries' mask conventions are in :mod:`attnkit.core.mask_convert`. Everything here is
re-exported by :mod:`attnkit.core.masks` (``attnkit.masks.causal()``).

Shape legend: B batch, H heads, L queries, S keys.
"""

from __future__ import annotations

from typing import Iterable

import torch

from .checks import require_choice, require_dense_rank
from .indices import alignment_offset
from .masks import ALIGNS, Mask, Predicate, values_readable
from .tiles import TileState


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
            if not values_readable(self.prefix):
                return None
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
        if not values_readable(self.q_ids, self.kv_ids):
            return None
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
    """A user-supplied dense bool tensor, (L, S) or (B|1, H|1, L, S); True = may attend."""

    def __init__(self, t: torch.Tensor):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.bool:
            dt = getattr(t, "dtype", type(t).__name__)
            raise TypeError(
                f"mask tensor must be bool with True = may attend, got {dt}; for a 0/1 Hugging Face mask use "
                "attnkit.masks.from_attention_mask, for an additive float mask pass it as bias="
            )
        require_dense_rank("mask", t)
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



def document(doc_ids: torch.Tensor, q_doc_ids: torch.Tensor | None = None) -> Mask:
    return DocumentMask(doc_ids, q_doc_ids)


def prefix_lm(prefix_len: int | torch.Tensor, align: str = "bottom_right") -> Mask:
    """Bidirectional over the first ``prefix_len`` keys, causal after them."""
    return KeyPrefixMask(prefix_len) | CausalMask(align)


def custom(fn: Predicate, depends_on: Iterable[str] = ("b", "h"), name: str | None = None) -> Mask:
    return CustomMask(fn, depends_on, name)

