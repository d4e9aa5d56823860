"""The masks given by values rather than structure: a dense bool tensor (:class:`TensorMask`) and a
user predicate (:class:`CustomMask`, :func:`custom`).

A dense tensor's tile states are counted from the tensor (summed-area table) when its values can be
read; a predicate's by evaluating it on the tile grid once per shape (:mod:`attnkit.core.tile_map`). The positional and
document masks are in :mod:`attnkit.core.mask_kinds`; everything here is re-exported by
:mod:`attnkit.core.masks`.

Shape legend: B batch, H heads, L queries, S keys; nq, nk query and key tile counts.
"""

from __future__ import annotations

from typing import Iterable

import torch

from .checks import require_dense_rank
from .mask_base import Mask, Predicate, values_readable
from .tiles import PARTIAL, TileGrid


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

    def tile_states(self, grid: TileGrid) -> torch.Tensor:
        t = self.t
        if t.shape[2] != grid.L or t.shape[3] != grid.S or not values_readable(t):
            return grid.fill(PARTIAL)
        flat = t.cpu().flatten(0, 1)  # (B·H, L, S)
        # a tile is non-empty if any row/head may attend a pair of it, full if all may attend all
        n_any, n_all = _tile_counts(flat.any(0), grid), _tile_counts(flat.all(0), grid)
        area = (grid.q_end - grid.q_start)[:, None] * (grid.k_end - grid.k_start)[None, :]
        return grid.states(full=n_all == area, empty=n_any == 0)

    def __repr__(self):
        return f"TensorMask(shape={tuple(self.t.shape)})"


def _tile_counts(x: torch.Tensor, grid: TileGrid) -> torch.Tensor:
    """How many True entries of a bool (L, S) tensor fall in each tile: (nq, nk), by a summed-area table."""
    c = torch.nn.functional.pad(x.to(torch.int64).cumsum(0).cumsum(1), (1, 0, 1, 0))  # (L + 1, S + 1)
    q0, q1, k0, k1 = grid.q_start[:, None], grid.q_end[:, None], grid.k_start[None, :], grid.k_end[None, :]
    return c[q1, k1] - c[q0, k1] - c[q1, k0] + c[q0, k0]


class CustomMask(Mask):
    """Any predicate ``(b, h, q_idx, kv_idx) -> bool tensor`` (FlexAttention's ``mask_mod``).

    ``depends_on`` names the indices it reads (``"b"``, ``"h"``). Left None, it starts as both (every
    batch row and head evaluated: correct for any predicate) and the first attention call narrows it
    to what the result's shape shows (:func:`attnkit.core.custom_checks.check_custom_functions`);
    ``depends_on=()`` declares it up front and keeps materialized masks (1, 1, L, S).

    Tiles: a predicate that reads neither ``b`` nor ``h`` gets tile skipping like the built-in
    masks, its tile states computed once per shape by evaluating it on the grid and cached
    (:mod:`attnkit.core.tile_map`) under a snapshot of what it reads (its closure cells, globals,
    bound object and their tensors' contents), so a changed capture is a new map. One that reads ``b`` or ``h`` has every tile
    evaluated (the sizes of b and h are not known to a tile grid).
    """

    def __init__(self, fn: Predicate, depends_on: Iterable[str] | None = None, name: str | None = None):
        if not callable(fn):
            raise TypeError(f"custom mask needs a callable (b, h, q_idx, kv_idx) -> bool, got {type(fn).__name__}")
        dims = frozenset(("b", "h") if depends_on is None else depends_on)
        if not dims <= {"b", "h"}:
            raise ValueError(f"depends_on may name only 'b' and 'h', got {sorted(dims)}")
        self.fn, self.dims, self.name = fn, dims, name or getattr(fn, "__name__", "custom")
        self.dims_declared = depends_on is not None  # else narrowed on the first call
        self.dims_read = False  # set once the first call (or tile map) has read them
        self.device: torch.device | None = None  # where the first call evaluated it (its captured tensors' device)

    def tile_states(self, grid: TileGrid) -> torch.Tensor:
        """Evaluated on the whole grid once per shape and cached (:func:`attnkit.core.tile_map.predicate_tile_states`);
        all PARTIAL when it reads b or h, on meta, or while torch.compile traces."""
        dev = self.device or torch.device("cpu")
        if dev.type == "meta" or torch.compiler.is_compiling():
            return grid.fill(PARTIAL)
        if not self.dims_declared and not self.dims_read:  # used outside a call (mask.tile_map): read them now
            from .custom_checks import read_dims

            self.dims, self.dims_read = read_dims(self.fn, 2, 2, grid.L, grid.S, dev), True
        if self.dims & {"b", "h"}:
            return grid.fill(PARTIAL)
        from .tile_map import predicate_tile_states

        return predicate_tile_states(self.fn, grid, device=dev)

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

    positional = True  # a predicate of (q_idx, kv_idx): under a cache it is handed positions

    def __repr__(self):
        return f"custom({self.name})"


def custom(fn: Predicate, depends_on: Iterable[str] | None = None, name: str | None = None) -> Mask:
    """A mask from a predicate ``(b, h, q_idx, kv_idx) -> bool``; see :class:`CustomMask`."""
    return CustomMask(fn, depends_on, name)
