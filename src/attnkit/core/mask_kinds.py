"""The named structural masks: causal, sliding window, prefix-LM and document (block-diagonal); the
dense-tensor and custom-predicate masks are in :mod:`attnkit.core.mask_values`.

Each is a :class:`~attnkit.core.masks.Mask` subclass with a predicate ``(b, h, q_idx, kv_idx) ->
bool`` (True = may attend) and, where it can, an analytic :meth:`~attnkit.core.masks.Mask.tile_states`
(one tensor expression over the whole tile grid) so blockwise and ring attention skip empty tiles
without evaluating them; the lower-case functions at the bottom are the public
constructors. Positional masks take ``align`` (``"bottom_right"`` or ``"top_left"``), which places
the L queries against the S keys when L != S. Key padding and the conversions from other
libraries' mask conventions are in :mod:`attnkit.core.mask_convert`. Everything here is
re-exported by :mod:`attnkit.core.masks` (``attnkit.masks.causal()``).

Shape legend: B batch, H heads, L queries, S keys.
"""

from __future__ import annotations

import torch

from .checks import require_choice
from .indices import alignment_offset
from .mask_base import ALIGNS, Mask, values_readable
from .tiles import PARTIAL, TileGrid, block_min_max


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

    def tile_states(self, grid: TileGrid) -> torch.Tensor:
        off = alignment_offset(self.align, grid.L, grid.S)
        return grid.states(full=grid.k_last <= grid.q_first + off, empty=grid.k_first > grid.q_last + off)

    positional = True
    shift_invariant = True

    @property
    def cache_key(self):
        return ("causal", self.align)

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

    def tile_states(self, grid: TileGrid) -> torch.Tensor:
        off = alignment_offset(self.align, grid.L, grid.S)
        p0, p1 = grid.q_first + off, grid.q_last + off  # positions of each block's first / last query
        far = grid.L + grid.S  # "unbounded" as a distance no tile can exceed
        lo = self.left if self.left is not None else far
        hi = self.right if self.right is not None else far
        empty = (grid.k_last < p0 - lo) | (grid.k_first > p1 + hi)
        full = (grid.k_first >= p1 - lo) & (grid.k_last <= p0 + hi)
        return grid.states(full, empty)

    positional = True
    shift_invariant = True

    @property
    def band_width(self):
        return None if self.left is None or self.right is None else self.left + self.right + 1

    @property
    def cache_key(self):
        return ("sliding_window", self.left, self.right, self.align)

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

    def tile_states(self, grid: TileGrid) -> torch.Tensor:
        if isinstance(self.prefix, torch.Tensor):
            if not values_readable(self.prefix):
                return grid.fill(PARTIAL)
            lo, hi = int(self.prefix.min()), int(self.prefix.max())
        else:
            lo = hi = self.prefix
        return grid.states(full=grid.k_last < lo, empty=grid.k_first >= hi)

    @property
    def positional(self):
        return not isinstance(self.prefix, torch.Tensor)

    @property
    def cache_key(self):
        return None if isinstance(self.prefix, torch.Tensor) else ("key_prefix", self.prefix)

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

    def tile_states(self, grid: TileGrid) -> torch.Tensor:
        """Per-block min/max of document ids: disjoint ranges prove a tile empty in every row; one
        shared id on both sides proves it full. Anything else is evaluated (ids may not be sorted)."""
        if not values_readable(self.q_ids, self.kv_ids):
            return grid.fill(PARTIAL)
        qi, ki = self.q_ids.cpu(), self.kv_ids.cpu()
        if qi.shape[1] != grid.L or ki.shape[1] != grid.S:
            raise ValueError(f"document ids cover L={qi.shape[1]}, S={ki.shape[1]} but the call has L={grid.L}, S={grid.S}")
        qmin, qmax = block_min_max(qi, grid.q_start, grid.q_end)  # (Bq, nq)
        kmin, kmax = block_min_max(ki, grid.k_start, grid.k_end)  # (Bk, nk)
        empty = ((qmax[:, :, None] < kmin[:, None, :]) | (kmax[:, None, :] < qmin[:, :, None])).all(0)
        full = ((qmin == qmax)[:, :, None] & (kmin == kmax)[:, None, :] & (qmin[:, :, None] == kmin[:, None, :])).all(0)
        return grid.states(full, empty)

    def __repr__(self):
        return f"DocumentMask(S={self.kv_ids.shape[1]})"


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
