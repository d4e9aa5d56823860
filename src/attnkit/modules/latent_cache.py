"""The cache of Multi-head Latent Attention: one compressed vector per token, never expanded.

DeepSeek-AI 2024, "DeepSeek-V2", https://arxiv.org/abs/2405.04434 §2.1.2–2.1.3. MLA computes, per
token, a latent ``c`` (``kv_lora_rank`` = r numbers, after an RMSNorm) from which every head's key
and value are linear images, plus one rotary key ``k_rope`` (``qk_rope_dim`` = dr numbers) shared by
all heads. Those r + dr numbers are all a decode step needs (see
:mod:`attnkit.modules.latent_attention` for why), so this cache stores exactly them:

    bytes per token per layer = (r + dr) · element size          (+ 8 for its int64 position)

against ``H · (dk + dv) · element size`` for a multi-head cache of the same model. With DeepSeek-V3's
widths (H=128, dk = 128 + 64, dv = 128, r = 512, dr = 64) that is 576 against 40,960 numbers: 71× less.

The buffer is laid out as the single key/value head of multi-query attention: ``[c | k_rope]`` is
the key (B, 1, S, r + dr) and its first r columns, a view into the same memory, the value
(B, 1, S, r). Nothing is stored twice.

Allocation: the first update allocates exactly its tokens (or ``max_len`` when given), later ones
double the capacity when full (growing with ``torch.cat`` would copy the whole cache every token).
All rows of a batch hold the same number of tokens (no per-row padding); positions continue from
the last one written unless given.

Shape legend: B batch, L new tokens, S cached tokens, r kv_lora_rank, dr qk_rope_dim.
"""

from __future__ import annotations

import torch

from ..core.checks import require_positive_int


class LatentCache:
    """Per-layer store of ``[latent | rotary key]`` rows for :class:`MultiHeadLatentAttention`."""

    kind = "latent"

    def __init__(self, max_len: int | None = None):
        self.max_len = None if max_len is None else require_positive_int("max_len", max_len)
        self.peak_nbytes = 0
        self.reset()

    def reset(self) -> None:
        """Forget everything (buffers freed; the next update allocates again)."""
        self._buf = self._pos = None  # (B, capacity, r + dr), (B, capacity) long
        self.length = 0
        self.in_order = True  # every write used default positions: slot s holds position s

    def crop(self, length: int) -> None:
        """Keep the first ``length`` tokens (speculative decoding's rejected drafts, or a benchmark's rerun)."""
        if isinstance(length, bool) or not isinstance(length, int) or not 0 <= length <= self.length:
            raise ValueError(f"length must be an int in [0, {self.length}] (the tokens held), got {length!r}")
        self.length = length

    @property
    def initialized(self) -> bool:
        return self._buf is not None

    @property
    def batch_size(self) -> int | None:
        return None if self._buf is None else self._buf.shape[0]

    @property
    def capacity(self) -> int:
        return 0 if self._buf is None else self._buf.shape[1]

    @property
    def kv_nbytes(self) -> int:
        """Bytes of the latent buffer (allocated capacity)."""
        return 0 if self._buf is None else self._buf.nelement() * self._buf.element_size()

    @property
    def nbytes(self) -> int:
        """All bytes held: the latent buffer plus the (B, capacity) position table."""
        return self.kv_nbytes + (0 if self._pos is None else self._pos.nelement() * self._pos.element_size())

    def positions_for(self, B: int, L: int, device=None) -> torch.Tensor:
        """(B, L) default positions of L new tokens: continuing after the last cached one."""
        start = 0 if self._pos is None else int(self._pos[0, self.length - 1]) + 1
        return torch.arange(start, start + L, device=device).expand(B, L)

    def update(self, latent: torch.Tensor, k_rope: torch.Tensor, positions: torch.Tensor | None = None):
        """Append L tokens; returns (kv (B, 1, S, r + dr), positions (B, S)) over everything cached.

        latent (B, L, r) (already normalised), k_rope (B, L, dr) (already rotated at its position).
        """
        self._check(latent, k_rope)
        B, L, r = latent.shape
        if positions is None:
            positions = self.positions_for(B, L, latent.device)
        else:
            self.in_order = False
        need = self.length + L
        if self._buf is None or need > self.capacity:
            self._grow(latent, k_rope, need)
        self._buf[:, self.length:need, :r] = latent
        self._buf[:, self.length:need, r:] = k_rope
        self._pos[:, self.length:need] = positions.to(self._pos.device).long().expand(B, L)
        self.length = need
        return self._kv_view(need), self._pos[:, :need]

    def _kv_view(self, S: int) -> torch.Tensor:
        """The first S rows as (B, 1, S, r + dr), zero-copy. The strides of its size-1 dims are the
        row-major ones a contiguous tensor would have (they address nothing): a fused CPU attention
        kernel reads those strides too, so the attention backend copies views whose size-1 dims
        carry others, which here would copy the whole cache every step."""
        B, cap, C = self._buf.shape
        return self._buf.as_strided((B, 1, S, C), (cap * C if B > 1 else S * C, S * C, C, 1), self._buf.storage_offset())

    def _grow(self, latent: torch.Tensor, k_rope: torch.Tensor, need: int) -> None:
        if self.max_len is not None and need > self.max_len:
            raise ValueError(f"LatentCache(max_len={self.max_len}) cannot hold {need} tokens; build it with a larger max_len or reset() it")
        cap = self.max_len or (need if self._buf is None else max(need, 2 * self.capacity))
        B, C = latent.shape[0], latent.shape[2] + k_rope.shape[2]
        buf = torch.empty(B, cap, C, dtype=latent.dtype, device=latent.device)
        pos = torch.zeros(B, cap, dtype=torch.long, device=latent.device)
        if self._buf is not None:
            buf[:, : self.length] = self._buf[:, : self.length]
            pos[:, : self.length] = self._pos[:, : self.length]
        self._buf, self._pos = buf, pos
        self.peak_nbytes = max(self.peak_nbytes, self.nbytes)

    def _check(self, latent: torch.Tensor, k_rope: torch.Tensor) -> None:
        if latent.dim() != 3 or k_rope.dim() != 3 or latent.shape[:2] != k_rope.shape[:2]:
            raise ValueError(f"LatentCache.update needs latent (B, L, r) and k_rope (B, L, dr) agreeing on (B, L), got {tuple(latent.shape)} and {tuple(k_rope.shape)}")
        if self._buf is None:
            return
        B, C = self._buf.shape[0], self._buf.shape[2]
        if latent.shape[0] != B:
            raise ValueError(f"LatentCache holds B={B} sequences but the input has B={latent.shape[0]}; reset() the cache for a new batch")
        if latent.shape[2] + k_rope.shape[2] != C:
            raise ValueError(f"LatentCache holds rows of r + dr = {C} numbers, got {latent.shape[2]} + {k_rope.shape[2]}; use one cache per MLA layer")
        if latent.dtype != self._buf.dtype:
            raise TypeError(f"LatentCache holds {self._buf.dtype}, got {latent.dtype}; reset() it or cast the inputs")

    def __repr__(self) -> str:
        state = "empty" if self._buf is None else f"B={self.batch_size}, capacity={self.capacity}, used={self.length}, row={self._buf.shape[2]}"
        return f"LatentCache({state})"
