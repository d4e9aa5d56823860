"""FlexAttention's ``BlockMask`` built from an attnkit mask's tile states, and kept per mask and shape.

FlexAttention skips the key blocks a ``BlockMask`` leaves out of each query block's lists and
evaluates its ``mask_mod`` only in the "partial" ones. attnkit's masks already know their tiles
(:meth:`attnkit.core.masks.Mask.tile_states`: EMPTY, FULL, PARTIAL on a tile grid), so the lists
are read off the (nq, nk) codes on BLOCK × BLOCK tiles: FULL tiles become full blocks (no mask
evaluated), PARTIAL ones partial blocks, EMPTY ones are left out. Built-in masks answer
analytically; a custom predicate's map is evaluated once per shape and cached
(:mod:`attnkit.core.tile_map`), so no (L, S) mask is built here.

Shape legend: L queries, S keys; nq, nk the BLOCK-row and BLOCK-column tile counts.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict

import torch

from ..core.cache_keys import enabled, freeze, same, snapshot
from ..core.tiles import FULL, PARTIAL, TileGrid

__all__ = ["BLOCK", "block_mask", "cached_block_mask", "held_tensors"]

BLOCK = 128  # FlexAttention's default sparse block size, rows and columns
CACHE_SIZE = 32  # BlockMasks kept

_LOCK = threading.Lock()
_BLOCK_MASKS: OrderedDict[tuple, tuple[object, object, tuple]] = OrderedDict()  # key -> (anchor, BlockMask, frozen tensors)


def held_tensors(obj, name: str):
    """(label, tensor) for every tensor a mask or bias holds: a dense mask, document ids, ALiBi
    slopes, a learned table, a tensor its custom function captures, those of its parts."""
    from ..core.tile_map import captured_tensors

    if obj is None:
        return
    if isinstance(obj, torch.nn.Module):
        yield from ((f"{name}.{n}", t) for n, t in [*obj.named_parameters(), *obj.named_buffers()])
    else:
        yield from ((f"{name}.{key}", val) for key, val in vars(obj).items() if isinstance(val, torch.Tensor))
    fn = getattr(obj, "fn", None)
    if callable(fn):
        yield from ((f"a tensor captured by {name}'s function", t) for t in captured_tensors(fn))
    for i, part in enumerate(getattr(obj, "parts", ()) or ()):
        yield from held_tensors(part, f"{name} part {i}")
    yield from held_tensors(getattr(obj, "inner", None), f"{name} inner")



def block_mask(mask, L: int, S: int, device: torch.device, codes: torch.Tensor | None = None):
    """FlexAttention's ``BlockMask`` for an attnkit ``mask`` from its tile states on BLOCK × BLOCK
    tiles (``codes``, (nq, nk), computed when not given; broadcast over batch rows and heads), with
    the mask's predicate as ``mask_mod`` for the partial blocks. None for no mask."""
    if mask is None:
        return None
    from torch.nn.attention.flex_attention import BlockMask

    if codes is None:
        grid = TileGrid.uniform(L, S, BLOCK, BLOCK)
        codes = mask.tile_states(grid).expand(grid.shape)
    cols = torch.arange(codes.shape[1]).expand_as(codes)

    def blocks(state: int) -> tuple[torch.Tensor, torch.Tensor]:
        sel = codes == state
        order = torch.argsort((~sel).to(torch.int8), dim=1, stable=True)  # the selected columns first, in order
        idx = torch.gather(cols, 1, order).to(torch.int32)
        return sel.sum(1).to(torch.int32)[None, None].to(device), idx[None, None].contiguous().to(device)

    partial_n, partial_idx = blocks(PARTIAL)
    full_n, full_idx = blocks(FULL)
    return BlockMask.from_kv_blocks(partial_n, partial_idx, full_n, full_idx, BLOCK_SIZE=BLOCK,
                                    mask_mod=mask.predicate(L, S), seq_lengths=(L, S))


def _lookup(key: tuple, anchor, snap):
    with _LOCK:
        hit = _BLOCK_MASKS.get(key)
    if hit is not None and hit[0] is anchor and (snap is None or same(hit[2], snap)):
        with _LOCK:
            if key in _BLOCK_MASKS:
                _BLOCK_MASKS.move_to_end(key)
        return hit[1]
    return None


def cached_block_mask(mask, L: int, S: int, device: torch.device):
    """:func:`block_mask`, kept per shape and device (:data:`CACHE_SIZE` entries): for masks with a ``cache_key``
    (causal, windows, chunks) under that key; for the others (documents, custom predicates, padding)
    under the mask object (held, so its id is not reused: the BlockMask's ``mask_mod`` reads that very
    object) while its snapshot (:mod:`attnkit.core.cache_keys`: constants, closures, globals, tensor
    contents) is unchanged; and under a custom predicate's cached tile map (the same tensor object
    while the predicate's snapshot is unchanged, so a predicate passed as a new mask object each call
    still hits), whose block lists are shared with the new mask's own ``mask_mod`` (a BlockMask's
    ``mask_mod`` always reads its own mask's live state). A mask the snapshot cannot see through, or
    any mask while caching is off, is built afresh."""
    if mask is None:
        return None
    if not enabled():
        return block_mask(mask, L, S, device)
    dev = str(device)
    if mask.cache_key is not None:
        keys = [((mask.cache_key, L, S, dev, torch.is_inference_mode_enabled()), None, None)]
    else:
        snap = snapshot(mask)
        if snap is None:
            return block_mask(mask, L, S, device)
        keys = [(("mask", id(mask), snap.key, L, S, dev), mask, snap)]
    hit = _lookup(*keys[0])
    if hit is not None:
        return hit
    codes = None
    if mask.cache_key is None:
        grid = TileGrid.uniform(L, S, BLOCK, BLOCK)
        codes = mask.tile_states(grid)
        keys.append((("tile map", id(codes), L, S, dev, torch.is_inference_mode_enabled()), codes, None))
        hit = _lookup(*keys[1])
        codes = codes.expand(grid.shape)
    if hit is not None:  # the same tile map (a predicate equal to another object's): its block lists, this mask's mask_mod
        bm = copy.copy(hit)
        bm.mask_mod = mask.predicate(L, S)
    else:
        bm = block_mask(mask, L, S, device, codes)
    with _LOCK:
        for key, anchor, snap in keys:
            _BLOCK_MASKS[key] = (anchor, bm, () if snap is None else freeze(snap))
            _BLOCK_MASKS.move_to_end(key)
        while len(_BLOCK_MASKS) > CACHE_SIZE:
            _BLOCK_MASKS.popitem(last=False)
    return bm
