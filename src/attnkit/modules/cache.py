"""Key/value caches for incremental decoding (public name: ``attnkit.cache``).

Vaswani et al. 2017, https://arxiv.org/abs/1706.03762 (autoregressive decoding); the cache itself
is folklore (Ott et al. 2019, fairseq, https://arxiv.org/abs/1904.01038). A causal decoder at step
t needs ``softmax(q_t K_{≤t}ᵀ) V_{≤t}``; the keys and values of earlier tokens never change (they
depend only on earlier tokens), so they are computed once, stored, and step t projects only its
own token: O(t) work per step instead of recomputing the O(t²) prefix.

Caches here (one object per attention layer):

* :class:`DynamicCache` — grows; buffers are preallocated and doubled when full (growing with
  ``torch.cat`` each step copies the whole cache every token: ../shared/PERF-NOTES.md measured
  2,584 → 440 tok/s).
* :class:`StaticCache` — ``max_len`` slots allocated once; writing past them raises.
* :class:`SlidingWindowCache` — a ring buffer of the last ``window`` tokens of each sequence
  (Mistral-style). **Keys are stored out of order**: each row writes its token with position p
  into slot ``p_count mod window`` and the cache keeps the absolute position of every slot, so
  attention masks by *position* (causal, window), never by slot index. No unrolling.
* :class:`CrossAttentionCache` — encoder keys/values, projected once and reused every step.

**Batches with mixed prompt lengths.** Each row has its own count of real tokens
(``lengths``, shape (B,)) and its own next position. Only real tokens are written: a left- or
right-padded prompt is *compacted* into the cache, so row b's slots 0..lengths[b]-1 hold its
tokens and the rest are invalid. Every slot stores its absolute position (B, S) and validity
(B, S), and attention over the cache uses:

* a key-validity mask (:class:`~attnkit.core.masks.KeyPaddingMask`), AND
* the causal / window / user masks evaluated at absolute positions (:class:`PositionedMask`:
  ``q_idx``, ``kv_idx`` of the predicate become the absolute positions of query and key), AND
* a query-validity mask, so a padding query attends nothing (zeros, never NaN).

Biases are evaluated at absolute positions the same way (:class:`PositionedBias`), so ALiBi, T5
and Shaw biases see ``pos_q - pos_k``, not slot distances. When every row has the same length and
default positions (the common, unpadded case), slot s holds position s and the cache says so
(``CacheView.in_order``): then one new query may attend every cached key and no mask is built at
all, and a prompt uses the bottom-right causal mask that SDPA runs as ``is_causal``.

Caches are for inference: they write into preallocated buffers in place, so use them under
``torch.no_grad()`` / ``torch.inference_mode()``.

Shape legend: B batch, Hkv key/value heads, L new tokens, S cached slots, E / Ev head dims.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..core import masks as M
from ..core.biases import ScoreModifier, SumOfModifiers, TensorBias
from ..core.checks import require_choice, require_positive_int, require_tensor


class CacheView(NamedTuple):
    """What attention reads after an update."""

    k: torch.Tensor  # (B, Hkv, S, E)
    v: torch.Tensor  # (B, Hkv, S, Ev)
    positions: torch.Tensor  # (B, S) long: absolute position of each slot
    valid: torch.Tensor | None  # (B, S) bool, True = real token; None = every slot valid
    in_order: bool  # every row holds positions 0..S-1 in slots 0..S-1 (index masks are exact)
    all_visible: bool  # a single new query may attend every slot (no causal/window mask needed)


# ----------------------------------------------------------------------------------------------
class KVCache:
    """Base class of the self-attention caches. Allocates lazily on the first :meth:`update`,
    taking B, Hkv, E, Ev, dtype and device from the first keys/values."""

    kind = "base"

    def __init__(self) -> None:
        self.peak_nbytes = 0
        self.reset()

    # state ---------------------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget everything (buffers are freed; the next update allocates again)."""
        self._k = self._v = self._pos = None
        self.lengths: torch.Tensor | None = None  # (B,) real tokens written per row
        self.next_positions: torch.Tensor | None = None  # (B,) default position of the next token
        self._uniform: int | None = 0  # common length while all rows are unpadded with default positions

    @property
    def initialized(self) -> bool:
        return self._k is not None

    @property
    def batch_size(self) -> int | None:
        return None if self._k is None else self._k.shape[0]

    @property
    def capacity(self) -> int:
        return 0 if self._k is None else self._k.shape[2]

    @property
    def kv_nbytes(self) -> int:
        """Bytes held by the key and value buffers (allocated capacity, not just used slots)."""
        return 0 if self._k is None else self._k.nelement() * self._k.element_size() + self._v.nelement() * self._v.element_size()

    @property
    def nbytes(self) -> int:
        """All bytes held: key/value buffers plus the (B, capacity) position table."""
        extra = 0 if self._pos is None else self._pos.nelement() * self._pos.element_size()
        return self.kv_nbytes + extra

    def seq_lengths(self) -> torch.Tensor:
        """(B,) tokens cached per row (for a sliding cache, tokens seen; it holds at most ``window``)."""
        self._require_init("seq_lengths()")
        return self.lengths.clone()

    def _require_init(self, what: str) -> None:
        if self._k is None:
            raise ValueError(f"{type(self).__name__}.{what} called before the cache holds anything; run a forward pass with cache= first")

    # positions -----------------------------------------------------------------------------------
    def positions_for(self, B: int, L: int, valid: torch.Tensor | None = None, device=None) -> torch.Tensor:
        """Default absolute positions (B, L) of L new tokens: each row continues from its own next
        position, counting only real tokens (a padding token gets the position of the next real one)."""
        dev = device if self._k is None else self._k.device
        start = torch.zeros(B, dtype=torch.long, device=dev) if self.next_positions is None else self.next_positions
        if start.shape[0] != B:
            raise ValueError(_batch_msg(self, start.shape[0], B))
        if valid is None:
            return start[:, None] + torch.arange(L, device=start.device)[None, :]
        before = valid.long().cumsum(1) - valid.long()  # real tokens before each token in the chunk
        return start[:, None] + before

    # update --------------------------------------------------------------------------------------
    def update(
        self, k: torch.Tensor, v: torch.Tensor, *, positions: torch.Tensor | None = None, valid: torch.Tensor | None = None
    ) -> CacheView:
        """Store L new tokens and return what attention should read.

        k (B, Hkv, L, E), v (B, Hkv, L, Ev); ``positions`` (B, L) absolute positions (None =
        continue each row); ``valid`` (B, L) bool, False for padding tokens (not stored).
        """
        B, Hkv, L, E = k.shape
        self._check(k, v, valid, positions)
        default = positions is None
        if default:
            positions = self.positions_for(B, L, valid, device=k.device)
        positions = positions.to(device=k.device, dtype=torch.long)
        if self._k is None:
            self._allocate(k, v)
            self.lengths = torch.zeros(B, dtype=torch.long, device=k.device)
            self.next_positions = torch.zeros(B, dtype=torch.long, device=k.device)
        if not (default and valid is None):
            self._uniform = None
        count = torch.full((B,), L, dtype=torch.long, device=k.device) if valid is None else valid.sum(1)
        if valid is None:
            nxt = positions[:, -1] + 1
        else:
            nxt = torch.where(valid, positions + 1, torch.zeros_like(positions)).amax(1)
        view = self._write(k, v, positions, valid, count)
        self.next_positions = torch.maximum(self.next_positions, nxt)
        return view

    def _check(self, k, v, valid, positions) -> None:
        require_tensor("k", k)
        require_tensor("v", v)
        if k.dim() != 4 or v.dim() != 4 or k.shape[:3] != v.shape[:3]:
            raise ValueError(f"cache update needs k (B, Hkv, L, E) and v (B, Hkv, L, Ev) agreeing on (B, Hkv, L), got {tuple(k.shape)} and {tuple(v.shape)}")
        B, Hkv, L, E = k.shape
        if self._k is not None:
            if B != self._k.shape[0]:
                raise ValueError(_batch_msg(self, self._k.shape[0], B))
            if (Hkv, E, v.shape[3]) != (self._k.shape[1], self._k.shape[3], self._v.shape[3]):
                raise ValueError(
                    f"{type(self).__name__} holds (Hkv, E, Ev)={(self._k.shape[1], self._k.shape[3], self._v.shape[3])} but got "
                    f"{(Hkv, E, v.shape[3])}; use one cache per attention layer"
                )
            if k.dtype != self._k.dtype or k.device != self._k.device:
                raise TypeError(f"{type(self).__name__} holds {self._k.dtype} on {self._k.device}, got {k.dtype} on {k.device}; reset() it or cast the inputs")
        for name, t, dt in (("valid", valid, "bool"), ("positions", positions, "integer")):
            if t is None:
                continue
            if not isinstance(t, torch.Tensor) or t.shape != (B, L):
                raise ValueError(f"{name} must be a (B, L)=({B}, {L}) tensor, got {tuple(getattr(t, 'shape', ())) or type(t).__name__}")
            if (dt == "bool") != (t.dtype == torch.bool) or t.is_floating_point():
                raise TypeError(f"{name} must be a {dt} tensor, got {t.dtype}")

    def _allocate(self, k, v) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _write(self, k, v, positions, valid, count) -> CacheView:  # pragma: no cover - abstract
        raise NotImplementedError

    # beam search ---------------------------------------------------------------------------------
    def reorder(self, indices: torch.Tensor | list[int]) -> None:
        """Row i becomes old row ``indices[i]`` (beam search); len(indices) may differ from B."""
        self._require_init("reorder()")
        idx = _check_indices(indices, self._k.shape[0], self._k.device)
        self._k, self._v, self._pos = self._k.index_select(0, idx), self._v.index_select(0, idx), self._pos.index_select(0, idx)
        self.lengths, self.next_positions = self.lengths.index_select(0, idx), self.next_positions.index_select(0, idx)

    def __repr__(self) -> str:
        state = "empty" if self._k is None else f"B={self._k.shape[0]}, Hkv={self._k.shape[1]}, capacity={self.capacity}, used={int(self.lengths.max())}"
        return f"{type(self).__name__}({state})"


def _batch_msg(cache, held: int, got: int) -> str:
    return (
        f"{type(cache).__name__} holds B={held} sequences but the input has B={got}; reset() the cache for a new batch, "
        f"or reorder(indices) it to {got} rows for beam search"
    )


def _check_indices(indices, B: int, device) -> torch.Tensor:
    idx = torch.as_tensor(indices, device=device)
    if idx.dim() != 1 or idx.numel() == 0 or idx.is_floating_point() or idx.dtype == torch.bool:
        raise ValueError(f"indices must be a non-empty 1-D integer tensor of row numbers, got {idx.dtype} shape {tuple(idx.shape)}")
    if bool((idx < 0).any()) or bool((idx >= B).any()):
        raise ValueError(f"indices must lie in [0, B={B}), got min {int(idx.min())}, max {int(idx.max())}")
    return idx.long()


def _scatter_rows(buf: torch.Tensor, new: torch.Tensor, rows: torch.Tensor, slots: torch.Tensor, cols: torch.Tensor) -> None:
    """buf[rows[i], :, slots[i]] = new[rows[i], :, cols[i]] for (B, Hkv, *, E) tensors."""
    buf[rows, :, slots] = new[rows, :, cols]


# ----------------------------------------------------------------------------------------------
class _LinearCache(KVCache):
    """Slot i of row b holds that row's i-th real token."""

    def _grow_to(self, needed: int) -> None:
        raise NotImplementedError

    def _allocate(self, k, v) -> None:
        self._alloc(k.shape[0], k.shape[1], k.shape[3], v.shape[3], self._initial_capacity(k.shape[2]), k.dtype, k.device)

    def _alloc(self, B, Hkv, E, Ev, cap, dtype, device) -> None:
        self._k = torch.zeros(B, Hkv, cap, E, dtype=dtype, device=device)
        self._v = torch.zeros(B, Hkv, cap, Ev, dtype=dtype, device=device)
        self._pos = torch.zeros(B, cap, dtype=torch.long, device=device)
        self.peak_nbytes = max(self.peak_nbytes, self.nbytes)

    def _write(self, k, v, positions, valid, count) -> CacheView:
        B, Hkv, L, _ = k.shape
        if self._uniform is not None:
            n0, S = self._uniform, self._uniform + L
            self._grow_to(S)
            self._k[:, :, n0:S] = k
            self._v[:, :, n0:S] = v
            self._pos[:, n0:S] = positions
            self._uniform = S
            self.lengths = self.lengths + L
            return CacheView(self._k[:, :, :S], self._v[:, :, :S], self._pos[:, :S], None, True, True)
        new_len = self.lengths + count
        S = int(new_len.max())
        self._grow_to(S)
        rows, cols = (valid if valid is not None else torch.ones(B, L, dtype=torch.bool, device=k.device)).nonzero(as_tuple=True)
        rank = (valid.long().cumsum(1) - 1)[rows, cols] if valid is not None else cols
        slots = self.lengths[rows] + rank
        _scatter_rows(self._k, k, rows, slots, cols)
        _scatter_rows(self._v, v, rows, slots, cols)
        self._pos[rows, slots] = positions[rows, cols]
        self.lengths = new_len
        ok = torch.arange(S, device=k.device)[None, :] < new_len[:, None]  # (B, S)
        return CacheView(self._k[:, :, :S], self._v[:, :, :S], self._pos[:, :S], ok, False, False)


class DynamicCache(_LinearCache):
    """Grows without bound; capacity doubles when full (amortised O(1) copies per token)."""

    kind = "dynamic"

    def __init__(self, *, initial_capacity: int = 64):
        self.initial_capacity = require_positive_int("initial_capacity", initial_capacity)
        super().__init__()

    def _initial_capacity(self, L: int) -> int:
        return max(self.initial_capacity, L)

    def _grow_to(self, needed: int) -> None:
        cap = self._k.shape[2]
        if needed <= cap:
            return
        new_cap = max(needed, 2 * cap)
        old = (self._k, self._v, self._pos)
        B, Hkv, _, E = self._k.shape
        self._alloc(B, Hkv, E, self._v.shape[3], new_cap, self._k.dtype, self._k.device)
        # old and new buffers are both alive during the copy: that is the true peak
        self.peak_nbytes = max(self.peak_nbytes, self.nbytes + sum(t.nelement() * t.element_size() for t in old))
        self._k[:, :, :cap], self._v[:, :, :cap], self._pos[:, :cap] = old


class StaticCache(_LinearCache):
    """``max_len`` slots per row, allocated on the first update; more tokens than that is an error."""

    kind = "static"

    def __init__(self, max_len: int):
        self.max_len = require_positive_int("max_len", max_len)
        super().__init__()

    def _initial_capacity(self, L: int) -> int:
        return self.max_len

    def _grow_to(self, needed: int) -> None:
        if needed > self.max_len:
            held = int(self.lengths.max())
            raise ValueError(
                f"StaticCache(max_len={self.max_len}) overflow: a row holds {held} tokens and {needed - held} more were written "
                f"(needs {needed} slots); build it with max_len >= {needed}, or use DynamicCache or SlidingWindowCache"
            )


class SlidingWindowCache(KVCache):
    """Ring buffer of each row's last ``window`` real tokens, for ``sliding_window(left=window-1)``
    attention. Slot = (token count) mod window; positions are stored per slot and masks use them."""

    kind = "sliding"

    def __init__(self, window: int):
        self.window = require_positive_int("window", window)
        super().__init__()

    def _allocate(self, k, v) -> None:
        B, Hkv, _, E = k.shape
        w = self.window
        self._k = torch.zeros(B, Hkv, w, E, dtype=k.dtype, device=k.device)
        self._v = torch.zeros(B, Hkv, w, v.shape[3], dtype=v.dtype, device=v.device)
        self._pos = torch.zeros(B, w, dtype=torch.long, device=k.device)
        self.peak_nbytes = max(self.peak_nbytes, self.nbytes)

    def _filled(self) -> torch.Tensor:
        return torch.arange(self.window, device=self._k.device)[None, :] < self.lengths.clamp(max=self.window)[:, None]  # (B, w)

    def _write(self, k, v, positions, valid, count) -> CacheView:
        B, Hkv, L, _ = k.shape
        w = self.window
        if L > 1:
            # queries early in the chunk need keys the chunk itself evicts: attend over old ring + chunk
            F = min(int(self.lengths.max()), w)
            old_ok = self._filled()[:, :F]
            new_ok = valid if valid is not None else torch.ones(B, L, dtype=torch.bool, device=k.device)
            view = CacheView(
                torch.cat([self._k[:, :, :F], k], 2), torch.cat([self._v[:, :, :F], v], 2),
                torch.cat([self._pos[:, :F], positions], 1), torch.cat([old_ok, new_ok], 1), False, False,
            )
        mask = valid if valid is not None else torch.ones(B, L, dtype=torch.bool, device=k.device)
        rank = mask.long().cumsum(1) - 1
        # only each row's last `window` real tokens of the chunk survive; writing only them keeps slots distinct
        keep = mask & (rank >= (count - w)[:, None])
        rows, cols = keep.nonzero(as_tuple=True)
        slots = (self.lengths[rows] + rank[rows, cols]) % w
        _scatter_rows(self._k, k, rows, slots, cols)
        _scatter_rows(self._v, v, rows, slots, cols)
        self._pos[rows, slots] = positions[rows, cols]
        self.lengths = self.lengths + count
        if self._uniform is not None:
            self._uniform += L
        if L > 1:
            return view
        F = min(int(self.lengths.max()), w)
        ok = self._filled()[:, :F]
        uniform = self._uniform is not None
        # one query, default positions, equal rows: the ring holds exactly its window
        return CacheView(self._k[:, :, :F], self._v[:, :, :F], self._pos[:, :F], None if uniform else ok, False, uniform)


# ----------------------------------------------------------------------------------------------
class CrossAttentionCache:
    """Encoder keys/values for cross-attention, projected once (first call) and reused after."""

    kind = "cross"

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._k = self._v = None
        self.valid: torch.Tensor | None = None  # (B, S) encoder padding, True = real token

    @property
    def initialized(self) -> bool:
        return self._k is not None

    filled = initialized

    @property
    def batch_size(self) -> int | None:
        return None if self._k is None else self._k.shape[0]

    @property
    def nbytes(self) -> int:
        if self._k is None:
            return 0
        return sum(t.nelement() * t.element_size() for t in (self._k, self._v, self.valid) if t is not None)

    kv_nbytes = nbytes

    def store(self, k: torch.Tensor, v: torch.Tensor, valid: torch.Tensor | None = None) -> CacheView:
        if self._k is not None:
            raise ValueError("CrossAttentionCache already holds encoder keys; pass key=None to reuse them, or reset() it for a new input")
        if k.dim() != 4 or v.dim() != 4 or k.shape[:3] != v.shape[:3]:
            raise ValueError(f"cross cache needs k (B, Hkv, S, E), v (B, Hkv, S, Ev), got {tuple(k.shape)} and {tuple(v.shape)}")
        if valid is not None and (valid.dtype != torch.bool or valid.shape != (k.shape[0], k.shape[2])):
            raise ValueError(f"encoder padding must be a bool (B, S)=({k.shape[0]}, {k.shape[2]}) tensor, got {valid.dtype} {tuple(valid.shape)}")
        self._k, self._v = k, v
        self.valid = None if valid is None or bool(valid.all()) else valid
        return self.view()

    def view(self, batch: int | None = None) -> CacheView:
        if self._k is None:
            raise ValueError("CrossAttentionCache is empty; the first call must pass key= (the encoder output) to fill it")
        if batch is not None and batch != self._k.shape[0]:
            raise ValueError(_batch_msg(self, self._k.shape[0], batch))
        S = self._k.shape[2]
        pos = torch.arange(S, device=self._k.device)[None, :]
        return CacheView(self._k, self._v, pos, self.valid, False, False)

    def reorder(self, indices) -> None:
        if self._k is None:
            raise ValueError("CrossAttentionCache.reorder() called before the cache holds anything; fill it with a forward pass first")
        idx = _check_indices(indices, self._k.shape[0], self._k.device)
        self._k, self._v = self._k.index_select(0, idx), self._v.index_select(0, idx)
        if self.valid is not None:
            self.valid = self.valid.index_select(0, idx)

    def __repr__(self) -> str:
        return "CrossAttentionCache(empty)" if self._k is None else f"CrossAttentionCache(B={self._k.shape[0]}, S={self._k.shape[2]})"


# positions → masks and biases ------------------------------------------------------------------
def _take(pos: torch.Tensor, b: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """pos (B|1, N)[b, idx] by broadcasting: (B', 1, l, 1) or (B', 1, 1, s)."""
    return pos[b if pos.shape[0] > 1 else torch.zeros_like(b), idx]


_POSITIONAL_MASKS = (M.CausalMask, M.SlidingWindowMask, M.CustomMask)


def _check_positional_mask(m: M.Mask) -> None:
    if isinstance(m, (M.AndMask, M.OrMask)):
        for p in m.parts:
            _check_positional_mask(p)
    elif isinstance(m, M.NotMask):
        _check_positional_mask(m.inner)
    elif isinstance(m, M.KeyPrefixMask) and not isinstance(m.prefix, torch.Tensor):
        return
    elif not isinstance(m, _POSITIONAL_MASKS):
        raise ValueError(
            f"with a cache, mask= is evaluated at absolute positions (q_idx, kv_idx = token positions), so it must be a "
            f"positional mask (causal, sliding_window, prefix_lm with an int, custom); got {m!r}, which indexes by slot. "
            f"Pass padding as attention_mask= (B, L) for the new tokens instead"
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
        parts = list(inner.parts) if isinstance(inner, SumOfModifiers) else [inner]
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


KINDS = {"dynamic": DynamicCache, "static": StaticCache, "sliding": SlidingWindowCache, "cross": CrossAttentionCache}


def make_cache(kind: str, **kwargs):
    """String factory: ``make_cache("static", max_len=2048)``, ``make_cache("sliding", window=256)``."""
    require_choice("kind", kind, tuple(KINDS))
    return KINDS[kind](**kwargs)


__all__ = [
    "CacheView", "KVCache", "DynamicCache", "StaticCache", "SlidingWindowCache", "CrossAttentionCache",
    "PositionedMask", "PositionedBias", "cache_mask", "make_cache", "KINDS",
]
