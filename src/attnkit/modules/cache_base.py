"""The cache contract: :class:`CacheView` (what attention reads) and :class:`KVCache` (the base class).

The design and its references are written out in :mod:`attnkit.modules.cache` (public name
``attnkit.cache``). :class:`KVCache`
does everything common to the self-attention caches: lazy allocation from the first keys/values,
per-row lengths and default positions, input checks, and beam-search :meth:`~KVCache.reorder`.
Subclasses (:mod:`attnkit.modules.cache_kinds`) only decide where tokens go (``_allocate``,
``_write``). The small helpers at the bottom (batch-size message, index checks, row scatter) are
shared with those subclasses and with :class:`~attnkit.modules.multihead.MultiHeadAttention`.

Shape legend: B batch, Hkv key/value heads, L new tokens, S cached slots, E / Ev head dims.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..core.checks import require_tensor


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
