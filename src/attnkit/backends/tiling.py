"""The blockwise backend's tile grid and tile sizes.

What a mask says about each (query-block, key-block) tile is the mask's own business
(:meth:`attnkit.core.masks.Mask.tile_states`, codes EMPTY / FULL / PARTIAL from
:mod:`attnkit.core.tiles`); this module only lays the uniform grid over a call and picks the tile
sizes. A new mask kind gets tile skipping here without any change to this file.

Shape legend: L queries, S keys, nq = ceil(L / block_q), nk = ceil(S / block_kv).
"""

from __future__ import annotations

import torch

from ..core import options
from ..core.masks import Mask
from ..core.tiles import EMPTY, FULL, PARTIAL, TileGrid, block_bounds, kept_fraction

__all__ = [
    "EMPTY", "FULL", "PARTIAL", "block_bounds", "tile_map", "kept_fraction",
    "set_tile_sizes", "banded_width", "default_tiles",
]


def tile_map(mask: Mask | None, L: int, S: int, block_q: int, block_kv: int) -> torch.Tensor:
    """(nq, nk) int8 codes (EMPTY / FULL / PARTIAL) of ``mask`` on the uniform tile grid."""
    grid = TileGrid.uniform(L, S, block_q, block_kv)
    if mask is None:
        return grid.fill(FULL)
    return mask.tile_states(grid).expand(grid.shape).contiguous()


# tile sizes ------------------------------------------------------------------------------------
def set_tile_sizes(block_q: int | None = None, block_kv: int | None = None) -> None:
    """Set the blockwise backend's tile sizes process-wide (None restores the per-call default).
    The same as ``attnkit.core.options.set_defaults(block_q=..., block_kv=...)``; a
    ``with attnkit.options(block_q=...)`` block overrides it for the code inside (this thread only)."""
    options.set_defaults(block_q=block_q, block_kv=block_kv)


def banded_width(mask: Mask | None) -> int | None:
    """The mask's band width (a window's left + right + 1), if it declares one."""
    return None if mask is None else mask.band_width


def default_tiles(mask: Mask | None, L: int, S: int, dtype: torch.dtype, device: torch.device) -> tuple[int, int]:
    """Tile sizes measured best on a 2-core CPU: 256 × 512 for dense and
    causal work (fewer Python iterations, GEMMs still in cache), 128 × 128 for narrow bands
    (less work wasted on the partly masked tiles along the band). Other devices get the dense choice."""
    w = banded_width(mask)
    if w is not None and w <= 1024:
        bq, bk = 128, 128
    else:
        bq, bk = 256, 512
    opts = options.current()  # context-local overrides over process defaults (set_tile_sizes)
    bq = opts.block_q or bq
    bk = opts.block_kv or bk
    return min(bq, L), min(bk, S)
