"""The vocabulary of tiles: what a mask says about a (query-block, key-block) tile, for a whole grid.

Blockwise attention, ring attention and inspect's tiled summaries all walk a grid of tiles: rows
of query blocks × columns of key blocks. A mask answers for every tile at once, through
:meth:`attnkit.core.masks.Mask.tile_states`, with one of three states:

* ``EMPTY`` (0) — no pair may attend, for any batch row or head: the tile is skipped;
* ``FULL`` (1) — every pair may attend: the tile is computed without evaluating the mask;
* ``PARTIAL`` (2) — not proved either way: the mask is evaluated on the tile (and a backend that
  can read the values may still find it empty or full there).

The answer is conservative — EMPTY or FULL only when proved — so skipping never changes a result,
and ``PARTIAL`` everywhere is always correct (the default for a mask that knows nothing more).

:class:`TileGrid` holds the grid: the first and last query / key index of every tile (tiles need
not be equal-sized: ring attention's chunks are cut by a layout) and the call's (L, S), which
aligned masks need. Codes are int8 tensors (nq, nk); :class:`TileState` names one tile's state.

Shape legend: L queries, S keys, nq query blocks, nk key blocks.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import torch

from . import cache_keys

EMPTY, FULL, PARTIAL = 0, 1, 2


class TileState(enum.Enum):
    """What a mask says about a whole tile: skip it, compute it without the mask, or evaluate the mask."""

    EMPTY = EMPTY  # no pair may attend: the tile is skipped
    FULL = FULL  # every pair may attend: no mask evaluation needed
    PARTIAL = PARTIAL  # not proved empty or full: the mask is evaluated on the tile

    def __and__(self, other: "TileState") -> "TileState":
        if TileState.EMPTY in (self, other):
            return TileState.EMPTY
        return TileState.FULL if self is other is TileState.FULL else TileState.PARTIAL

    def __or__(self, other: "TileState") -> "TileState":
        if TileState.FULL in (self, other):
            return TileState.FULL
        return TileState.EMPTY if self is other is TileState.EMPTY else TileState.PARTIAL

    def __invert__(self) -> "TileState":
        return {TileState.EMPTY: TileState.FULL, TileState.FULL: TileState.EMPTY}.get(self, TileState.PARTIAL)


@dataclass(frozen=True)
class TileGrid:
    """Tile bounds of one call: tile (i, j) covers queries [q_start[i], q_end[i]) × keys [k_start[j], k_end[j]).

    q_start, q_end: int64 (nq,); k_start, k_end: int64 (nk,); L, S: the call's query / key counts.
    """

    L: int
    S: int
    q_start: torch.Tensor
    q_end: torch.Tensor
    k_start: torch.Tensor
    k_end: torch.Tensor
    # (block_q, block_kv) of a grid built by :meth:`uniform`, None otherwise: lets caches of per-grid
    # results (custom predicates' tile maps) key on two ints instead of comparing the bounds
    block: tuple[int, int] | None = field(default=None, compare=False)

    @classmethod
    def uniform(cls, L: int, S: int, block_q: int, block_kv: int) -> "TileGrid":
        """Blocks of ``block_q`` queries × ``block_kv`` keys (the last of each possibly shorter)."""
        q0, q1 = block_bounds(L, block_q)
        k0, k1 = block_bounds(S, block_kv)
        return cls(L, S, q0, q1, k0, k1, (block_q, block_kv))

    @classmethod
    def single(cls, q_range: tuple[int, int], kv_range: tuple[int, int], L: int, S: int) -> "TileGrid":
        """A 1 × 1 grid: the tile ``q_range`` × ``kv_range``."""
        t = lambda a: torch.tensor([a], dtype=torch.int64)  # noqa: E731
        return cls(L, S, t(q_range[0]), t(q_range[1]), t(kv_range[0]), t(kv_range[1]))

    @property
    def shape(self) -> tuple[int, int]:
        return self.q_start.shape[0], self.k_start.shape[0]

    # broadcastable bounds, inclusive: (nq, 1) for queries, (1, nk) for keys
    @property
    def q_first(self) -> torch.Tensor:
        return self.q_start[:, None]

    @property
    def q_last(self) -> torch.Tensor:
        return self.q_end[:, None] - 1

    @property
    def k_first(self) -> torch.Tensor:
        return self.k_start[None, :]

    @property
    def k_last(self) -> torch.Tensor:
        return self.k_end[None, :] - 1

    def fill(self, code: int) -> torch.Tensor:
        """(nq, nk) int8 codes all equal to ``code``."""
        return torch.full(self.shape, code, dtype=torch.int8)

    def states(self, full: torch.Tensor, empty: torch.Tensor) -> torch.Tensor:
        """(nq, nk) codes from two broadcastable bool tensors: proved empty wins, then proved full."""
        out = torch.where(empty, EMPTY, torch.where(full, FULL, PARTIAL)).to(torch.int8)
        return out.expand(self.shape)


def block_bounds(n: int, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Start and (exclusive) end of every block: two int64 tensors (ceil(n / block),)."""
    start = torch.arange(0, n, block, dtype=torch.int64)
    return start, torch.clamp(start + block, max=n)


# combining codes of parts (the grids of AndMask / OrMask / NotMask) ----------------------------
def and_states(parts: torch.Tensor) -> torch.Tensor:
    """parts (P, nq, nk) → (nq, nk): empty if any part is; full if all are.

    Two partial tiles stay partial: they may not overlap at all (causal & ~causal), which only
    evaluation shows."""
    out = torch.full(parts.shape[1:], PARTIAL, dtype=torch.int8)
    out[(parts == FULL).all(0)] = FULL
    out[(parts == EMPTY).any(0)] = EMPTY
    return out


def or_states(parts: torch.Tensor) -> torch.Tensor:
    """parts (P, nq, nk) → (nq, nk): full if any part is; empty if all are (two partials may cover it together)."""
    out = torch.full(parts.shape[1:], PARTIAL, dtype=torch.int8)
    out[(parts == EMPTY).all(0)] = EMPTY
    out[(parts == FULL).any(0)] = FULL
    return out


def not_states(codes: torch.Tensor) -> torch.Tensor:
    """Complement: empty ↔ full, partial stays partial."""
    out = codes.clone()
    out[codes == EMPTY] = FULL
    out[codes == FULL] = EMPTY
    return out


def block_all_any(x: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-block all / any over the last axis of a bool (R, n) tensor → two bool (R, nblocks).

    Blocks are [starts[j], ends[j]); computed by cumulative counts, so blocks may have any sizes."""
    c = torch.nn.functional.pad(x.to(torch.int64).cumsum(-1), (1, 0))  # (R, n + 1)
    count = c[:, ends] - c[:, starts]
    return count == (ends - starts)[None, :], count > 0


def block_min_max(ids: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-block min / max over the last axis of an integer (R, n) tensor → two (R, nblocks)."""
    sizes = (ends - starts).tolist()
    if len(set(sizes[:-1])) <= 1 and int(starts[0]) == 0 and sizes[-1] <= sizes[0]:  # uniform blocks: one reshape
        R, n = ids.shape
        block, nb = sizes[0], len(sizes)
        pad = nb * block - n
        mn = torch.nn.functional.pad(ids, (0, pad), value=torch.iinfo(ids.dtype).max).view(R, nb, block).amin(-1)
        mx = torch.nn.functional.pad(ids, (0, pad), value=torch.iinfo(ids.dtype).min).view(R, nb, block).amax(-1)
        return mn, mx
    pieces = [(ids[:, a:b].amin(-1), ids[:, a:b].amax(-1)) for a, b in zip(starts.tolist(), ends.tolist())]
    return torch.stack([p[0] for p in pieces], -1), torch.stack([p[1] for p in pieces], -1)


_KEPT_CACHE: dict[tuple, tuple[float, float]] = {}


def kept_fraction(mask, L: int, S: int, block_q: int, block_kv: int) -> tuple[float, float]:
    """(fraction of the L × S area in tiles not skipped, fraction in tiles needing mask evaluation)
    of ``mask`` (an attnkit Mask or None) on a uniform grid of ``block_q`` × ``block_kv`` tiles.

    Cached per shape for masks with a ``cache_key`` (causal, windows, chunks), so cost-based
    dispatch costs microseconds on the calls where a kernel takes only a few milliseconds."""
    if mask is None:
        return 1.0, 0.0
    key = mask.cache_key if cache_keys.enabled() else None
    if key is not None:
        key = (key, L, S, block_q, block_kv)
        if key in _KEPT_CACHE:
            return _KEPT_CACHE[key]
    grid = TileGrid.uniform(L, S, block_q, block_kv)
    codes = mask.tile_states(grid).expand(grid.shape)
    area = (grid.q_end - grid.q_start).double()[:, None] * (grid.k_end - grid.k_start).double()[None, :]
    total = float(L) * float(S)
    result = float(area[codes != EMPTY].sum()) / total, float(area[codes == PARTIAL].sum()) / total
    if key is not None:
        if len(_KEPT_CACHE) > 4096:
            _KEPT_CACHE.clear()
        _KEPT_CACHE[key] = result
    return result
