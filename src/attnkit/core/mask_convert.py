"""Key padding masks, and conversions from other libraries' mask conventions.

:class:`KeyPaddingMask` holds per-sequence key validity as a bool (B, S) tensor (True = real
token, may be attended). Build it from lengths with :func:`padding_mask`, or convert a mask from
a library whose polarity differs: :func:`from_attention_mask` (Hugging Face, 0/1 with 1 = keep)
and :func:`from_key_padding_mask` (``torch.nn.MultiheadAttention``, bool with True = ignore).
Everything here is re-exported by :mod:`attnkit.core.masks` (``attnkit.masks.padding_mask(...)``).

Checks of tensor *values* (lengths in range, a 0/1 attention mask) run in eager mode; on ``meta``
tensors and while ``torch.compile`` / ``torch.export`` trace they are skipped
(:func:`~attnkit.core.masks.values_readable`), since there is no value to read or a branch on one
would break the graph.

Shape legend: B batch, H heads, L queries, S keys.
"""

from __future__ import annotations

import torch

from .checks import require_choice
from .mask_base import Mask, values_readable
from .tiles import PARTIAL, TileGrid, block_all_any


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

    def tile_states(self, grid: TileGrid) -> torch.Tensor:
        if not values_readable(self.valid):  # meta tensors, torch.compile: no values to read
            return grid.fill(PARTIAL)
        allv, anyv = block_all_any(self.valid.cpu(), grid.k_start, grid.k_end)  # (B, nk)
        return grid.states(full=allv.all(0)[None, :], empty=~anyv.any(0)[None, :])

    def __repr__(self):
        return f"KeyPaddingMask(B={self.valid.shape[0]}, S={self.valid.shape[1]})"


def padding_mask(lengths: torch.Tensor | list[int], max_len: int, *, side: str = "right") -> Mask:
    """Keys ``>= lengths[b]`` are padding (``side="right"``), or the first ``max_len - lengths[b]`` (left)."""
    if isinstance(max_len, bool) or not isinstance(max_len, int):
        raise TypeError(f"max_len must be an int (the key length S), got {type(max_len).__name__} ({max_len!r})")
    if max_len < 0:
        raise ValueError(f"max_len must be >= 0 (the key length S), got {max_len}")
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1 or lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
        raise ValueError(f"lengths must be a 1-D integer tensor (B,), got {lengths.dtype} shape {tuple(lengths.shape)}")
    if values_readable(lengths) and (bool((lengths < 0).any()) or bool((lengths > max_len).any())):
        raise ValueError(f"lengths must lie in [0, max_len={max_len}], got {lengths.tolist()}")
    require_choice("side", side, ("left", "right"))
    pos = torch.arange(max_len, device=lengths.device)
    valid = pos[None, :] < lengths[:, None] if side == "right" else pos[None, :] >= (max_len - lengths)[:, None]
    return KeyPaddingMask(valid)


def from_attention_mask(attention_mask: torch.Tensor) -> Mask:
    """Hugging Face convention: (B, S) with 1 = real token, 0 = padding."""
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 2:
        raise ValueError(f"attention_mask must be a (B, S) tensor of 0/1, got {tuple(getattr(attention_mask, 'shape', ()))}")
    if attention_mask.dtype != torch.bool and values_readable(attention_mask) and not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
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
