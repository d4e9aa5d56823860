"""Mask algebra: ``a & b``, ``a | b`` and ``~a`` of any masks, as masks.

A combined mask evaluates its parts' predicates and reduces them element-wise; its tile states
come from the parts' tile states by the same logic (:func:`attnkit.core.tiles.and_states` etc.),
so blockwise and ring attention skip the tiles the combination empties without evaluating it.
The operators on :class:`attnkit.core.masks.Mask` build these; the classes are re-exported from
:mod:`attnkit.core.masks`.

Shape legend: B batch, H heads, L queries, S keys.
"""

from __future__ import annotations

import torch

from .mask_base import Mask, Predicate
from .tiles import TileGrid, and_states, not_states, or_states

class _Combined(Mask):
    def __init__(self, *parts: Mask):
        self.parts = parts
        self.dims = frozenset().union(*(p.dims for p in parts))

    @property
    def batch_size(self) -> int | None:
        sizes = {p.batch_size for p in self.parts} - {None}
        if len(sizes) > 1:
            raise ValueError(f"combined masks were built for different batch sizes {sorted(sizes)}; build them for the same batch")
        return sizes.pop() if sizes else None

    @property
    def num_heads(self) -> int | None:
        return max((p.num_heads for p in self.parts if p.num_heads is not None), default=None)

    def _part_states(self, grid: TileGrid) -> torch.Tensor:
        return torch.stack([p.tile_states(grid).expand(grid.shape) for p in self.parts])  # (P, nq, nk)

    @property
    def positional(self) -> bool:
        return all(p.positional for p in self.parts)

    @property
    def shift_invariant(self) -> bool:
        return all(p.shift_invariant for p in self.parts)

    @property
    def cache_key(self) -> tuple | None:
        keys = [p.cache_key for p in self.parts]
        return None if None in keys else (type(self).__name__, *keys)

    def __repr__(self) -> str:
        sep = {"AndMask": " & ", "OrMask": " | "}[type(self).__name__]
        return "(" + sep.join(repr(p) for p in self.parts) + ")"


class AndMask(_Combined):
    def predicate(self, L, S):
        fns = [p.predicate(L, S) for p in self.parts]
        return lambda b, h, q, kv: _reduce(fns, b, h, q, kv, torch.logical_and)

    def tile_states(self, grid):
        return and_states(self._part_states(grid))

    @property
    def band_width(self):
        widths = [w for w in (p.band_width for p in self.parts) if w is not None]
        return min(widths) if widths else None


class OrMask(_Combined):
    def predicate(self, L, S):
        fns = [p.predicate(L, S) for p in self.parts]
        return lambda b, h, q, kv: _reduce(fns, b, h, q, kv, torch.logical_or)

    def tile_states(self, grid):
        return or_states(self._part_states(grid))


def _reduce(fns: list[Predicate], b, h, q, kv, op) -> torch.Tensor:
    out = torch.as_tensor(fns[0](b, h, q, kv))
    for fn in fns[1:]:
        out = op(out, fn(b, h, q, kv))
    return out


class NotMask(Mask):
    def __init__(self, inner: Mask):
        self.inner = inner
        self.dims = inner.dims

    @property
    def batch_size(self):
        return self.inner.batch_size

    @property
    def num_heads(self):
        return self.inner.num_heads

    def predicate(self, L, S):
        fn = self.inner.predicate(L, S)
        return lambda b, h, q, kv: torch.logical_not(fn(b, h, q, kv))

    def tile_states(self, grid):
        return not_states(self.inner.tile_states(grid).expand(grid.shape))

    @property
    def positional(self):
        return self.inner.positional

    @property
    def shift_invariant(self):
        return self.inner.shift_invariant

    @property
    def cache_key(self):
        k = self.inner.cache_key
        return None if k is None else ("NotMask", k)

    def __repr__(self):
        return f"~{self.inner!r}"
