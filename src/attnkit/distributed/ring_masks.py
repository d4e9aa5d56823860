"""Masks and position biases for ring attention, read from the masks' and biases' own descriptions.

Ring attention (``ring_attention.py``) sees a sequence of L positions cut into equal chunks
(``layout.py``); every (query chunk, key chunk) pair is one tile of a
:class:`~attnkit.core.tiles.TileGrid` over the *global* (L, L) sequence. So the mask's own
:meth:`~attnkit.core.masks.Mask.tile_states` says, once per call, which pairs are empty (skipped:
no FLOPs, on every rank), full (computed without a mask) or partial (the mask is evaluated on the
block at global positions). Any mask defined over the global sequence is served this way: causal,
sliding window, chunked, document (ids of the whole sequence), prefix-LM, dense (L, L) tensors and
predicates; position biases (ALiBi, T5, Shaw, ``custom_bias``) are evaluated at global positions.

Padding: positions ``>= L`` (the tail ``shard_sequence`` adds) are masked for everyone — a padded
key is seen by no query and a padded query sees nothing (output 0, no gradient).

Shape legend: B batch, H query heads, Hkv key/value heads, G = H / Hkv, lq / lk a block's query /
key rows; allowed and bias come out as (B|1, Hkv|1, G|1, lq, lk), the grouped layout of ``block.py``.
"""

from __future__ import annotations

import torch

from ..core import masks as M
from ..core.biases import ScoreModifier, as_modifier
from ..core.reachable import grad_tensors
from ..core.tiles import EMPTY, FULL, PARTIAL, TileGrid
from .layout import num_chunks

# chunk-pair codes: the core's tile vocabulary
SKIP_PAIR, FULL_PAIR, MASKED_PAIR = EMPTY, FULL, PARTIAL


def resolve_mask(mask: object, causal: bool) -> M.Mask | None:
    """``mask=`` normalised (a Mask, bool (L, L) tensor or predicate), AND-ed with ``causal=True``."""
    m = M.as_mask(mask)
    if causal:
        m = M.causal() if m is None else m & M.causal()
    return m


def resolve_bias(bias: object) -> ScoreModifier | None:
    """``bias=`` normalised; ring attention serves additive biases whose parameters need no gradient."""
    b = as_modifier(bias)
    if b is None:
        return None
    if not b.additive:
        raise ValueError(
            f"ring attention adds a bias to the scores but cannot apply a score modifier ({b!r} is not additive); "
            "use an additive bias (ALiBi, T5, Shaw, custom_bias, a tensor) or a single-device backend"
        )
    # every trainable tensor the bias reaches, as blockwise and flex find them: its parameters, and what a
    # custom function reads through a closure, a list, a partial or a bound object (ring drops their gradients)
    if torch.is_grad_enabled() and grad_tensors(b):
        raise ValueError(
            f"ring attention computes no gradient for bias parameters, but {b!r} has trainable ones; freeze them "
            "(bias.requires_grad_(False)) or wrap the call in torch.no_grad(), or train on a single-device backend"
        )
    return b


def chunk_codes(mask: M.Mask | None, layout: str, world_size: int, chunk_len: int, seq_len: int) -> list[list[int]]:
    """codes[cq][ck] (SKIP_PAIR / FULL_PAIR / MASKED_PAIR) for every pair of global chunks.

    The mask's tile states over the unpadded L = ``seq_len`` positions; a chunk wholly in the
    padding is skipped, one that reaches into it is masked (its padded rows need masking)."""
    n = num_chunks(layout, world_size)
    start = torch.arange(n, dtype=torch.int64) * chunk_len
    end = start + chunk_len
    real = start < seq_len  # chunks holding at least one real position
    clipped_end = torch.clamp(end, max=seq_len)
    padded = end > seq_len  # chunks reaching into the padding
    nr = int(real.sum())
    if mask is None:
        codes = torch.full((nr, nr), FULL, dtype=torch.int8)
    else:
        grid = TileGrid(seq_len, seq_len, start[:nr], clipped_end[:nr], start[:nr], clipped_end[:nr])
        codes = mask.tile_states(grid).expand(grid.shape).clone()
    pad = padded[:nr]
    codes[(pad[:, None] | pad[None, :]) & (codes == FULL)] = PARTIAL
    out = torch.full((n, n), EMPTY, dtype=torch.int8)
    out[:nr, :nr] = codes
    return out.tolist()


def _grouped(t: torch.Tensor, Hkv: int) -> torch.Tensor:
    """(B|1, H|1, lq, lk) → (B|1, Hkv|1, G|1, lq, lk)."""
    if t.shape[1] == 1:
        return t.unsqueeze(1)
    return t.view(t.shape[0], Hkv, t.shape[1] // Hkv, *t.shape[2:])


def _indices(obj, q_pos: torch.Tensor, k_pos: torch.Tensor, seq_len: int, B: int, H: int):
    """Broadcastable (b, h, q, kv) global indices; padded positions clamped into range (masked anyway)."""
    dev = q_pos.device
    b = torch.arange(B if "b" in obj.dims else 1, device=dev).view(-1, 1, 1, 1)
    h = torch.arange(H if "h" in obj.dims else 1, device=dev).view(1, -1, 1, 1)
    q = q_pos.clamp(max=seq_len - 1).view(1, 1, -1, 1)
    kv = k_pos.clamp(max=seq_len - 1).view(1, 1, 1, -1)
    return b, h, q, kv


def block_allowed(mask: M.Mask | None, q_pos, k_pos, seq_len: int, B: int, H: int, Hkv: int) -> torch.Tensor:
    """Bool (B|1, Hkv|1, G|1, lq, lk), True = may attend, for queries at global ``q_pos`` (lq,) and
    keys at ``k_pos`` (lk,): the mask AND both positions real (< seq_len)."""
    real = (q_pos[:, None] < seq_len) & (k_pos[None, :] < seq_len)  # (lq, lk)
    if mask is None:
        return real.view(1, 1, 1, *real.shape)
    allowed = torch.as_tensor(mask.predicate(seq_len, seq_len)(*_indices(mask, q_pos, k_pos, seq_len, B, H)))
    return _grouped(allowed & real, Hkv)


def block_bias(bias: ScoreModifier | None, q_pos, k_pos, seq_len: int, B: int, H: int, Hkv: int, dtype) -> torch.Tensor | None:
    """Additive bias (B|1, Hkv|1, G|1, lq, lk) at global positions, or None."""
    if bias is None:
        return None
    val = torch.as_tensor(bias.bias_fn(seq_len, seq_len)(*_indices(bias, q_pos, k_pos, seq_len, B, H)))
    return _grouped(val.to(dtype), Hkv)
