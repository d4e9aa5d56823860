"""Tile maps of custom predicates, computed once per shape, and a printable view of any mask's tiles.

A built-in mask proves its tiles empty or full analytically (:meth:`attnkit.core.masks.Mask.tile_states`).
A user predicate ``(b, h, q_idx, kv_idx) -> bool`` (FlexAttention's ``mask_mod``) cannot, so, as
FlexAttention's ``create_block_mask`` does, its tiles are found by *evaluating* it on the whole
(L, S) index grid, in chunks of query rows (never the (L, S) matrix at once), vectorised with the
broadcast index tensors of :mod:`attnkit.core.indices`:

* per chunk: allowed (B', H', l, S) → any / all over batch rows and heads → (l, S);
* per query tile: any / all over its rows → (S,); per key tile: any / all over its keys
  (:func:`attnkit.core.tiles.block_all_any`) → EMPTY (nothing may attend), FULL (everything may),
  PARTIAL (the rest).

The result is cached in a bounded LRU keyed by a snapshot of everything the predicate reads (its
code, closure cells, the globals its code names, a bound object's attributes, the content of every
tensor among them: :mod:`attnkit.core.cache_keys`) and (L, S, B', H', tile bounds, device), so a
model with many layers pays for it once per shape, and a rebound or edited capture is a new key.
A predicate the snapshot cannot see through (it reads a user module, a file, a random generator)
is evaluated every call, uncached. It must still be pure in its indices: the same state gives the
same answer.

:class:`TileMap` prints a tile grid like FlexAttention's ``BlockMask``: ``██`` full, ``░░`` partial,
two spaces empty (:meth:`attnkit.core.masks.Mask.tile_map`).

Shape legend: B batch, H heads, L queries, S keys; B', H' 1 for a predicate that does not read
b / h; nq, nk query and key tile counts; l rows of one chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .cache_keys import cell_filled, snapshot
from .identity_cache import SnapshotLRU
from .indices import index_grid
from .tiles import EMPTY, FULL, PARTIAL, TileGrid, block_all_any

__all__ = ["predicate_tile_states", "clear_cache", "cache_info", "captured_tensors", "TileMap", "CHUNK_ELEMENTS", "CACHE_SIZE"]

CHUNK_ELEMENTS = 1 << 22  # predicate results evaluated at once (4 Mi bools: 512 rows of an 8k grid)
BASE = 64  # uniform grids whose tile sizes are multiples of BASE are derived from the BASE × BASE map
CACHE_SIZE = 128  # tile maps kept (one per predicate, shape and tile size)

_CACHE = SnapshotLRU(lambda: CACHE_SIZE)  # key -> (the predicate's frozen tensors, codes)


def predicate_tile_states(
    fn: Callable,
    grid: TileGrid,
    *,
    batch: int = 1,
    heads: int = 1,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """(nq, nk) int8 codes EMPTY / FULL / PARTIAL of predicate ``fn`` on ``grid``, across ``batch``
    rows and ``heads`` heads (pass 1 for an index the predicate does not read), cached."""
    dev = torch.device(device) if device is not None else torch.device("cpu")
    gkey = _grid_key(grid)
    snap = snapshot(fn)
    key = None if snap is None else (snap.key, grid.L, grid.S, batch, heads, gkey, str(dev))
    hit = None if key is None else _CACHE.get(key, snap)
    if hit is not None:
        return hit
    if gkey[0] == "uniform" and gkey[1:] != (BASE, BASE) and gkey[1] % BASE == 0 and gkey[2] % BASE == 0:
        # every tile size a call asks for (the cost model's, the fused path's, the tile loop's) comes
        # from one evaluation on the BASE grid: a tile is empty / full exactly when all its BASE tiles are
        fine = predicate_tile_states(fn, TileGrid.uniform(grid.L, grid.S, BASE, BASE), batch=batch, heads=heads, device=dev)
        codes = _coarsen(fine, gkey[1] // BASE, gkey[2] // BASE)
    elif gkey[0] == "uniform":
        codes = _evaluate_uniform(fn, grid.L, grid.S, gkey[1], gkey[2], batch, heads, dev)
    else:
        codes = _evaluate(fn, grid, batch, heads, dev)
    if key is not None:
        _CACHE.put(key, snap, codes)
    return codes


def clear_cache() -> None:
    """Forget every cached tile map (a predicate that read changed global state: rebuild instead)."""
    _CACHE.clear()


def cache_info() -> dict[str, int]:
    """{"hits", "misses", "size"} of the tile-map cache since the last :func:`clear_cache`."""
    return _CACHE.info()


def _call(fn: Callable, q_range, kv_range, nb: int, nh: int, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``fn`` on the index grid: bool (l, s) on the CPU, reduced over batch rows and heads as
    (any, all) — the same tensor twice when there is one of each."""
    g = index_grid(q_range, kv_range, batch=nb, heads=nh, device=dev)
    allowed = torch.as_tensor(fn(g.b, g.h, g.q, g.kv), device=dev)
    if allowed.dtype != torch.bool:
        name = getattr(fn, "__name__", repr(fn))
        raise TypeError(f"mask predicate {name} must return a bool tensor, got {allowed.dtype}; compare with >=, == etc.")
    shape = (nb, nh, q_range[1] - q_range[0], kv_range[1] - kv_range[0])
    allowed = allowed.expand(shape).cpu()
    if nb * nh == 1:
        return allowed[0, 0], allowed[0, 0]
    flat = allowed.reshape(nb * nh, *shape[2:])
    return flat.any(0), flat.all(0)


def _blocks(x: torch.Tensor, block: int, dim: int, op: str) -> torch.Tensor:
    """any / all of bool ``x`` over consecutive blocks of ``block`` along ``dim`` (0 or 1; the last
    block may be shorter): (n, m) → (ceil(n / block), m) or (n, ceil(m / block))."""
    n = x.shape[dim]
    whole = n // block * block
    parts = []
    if whole:
        main = x.narrow(dim, 0, whole)
        shape = (whole // block, block, x.shape[1]) if dim == 0 else (x.shape[0], whole // block, block)
        parts.append(getattr(main.reshape(shape), op)(dim + 1))
    if whole < n:
        parts.append(getattr(x.narrow(dim, whole, n - whole), op)(dim, keepdim=True))
    return torch.cat(parts, dim) if len(parts) > 1 else parts[0]


def _evaluate_uniform(fn: Callable, L: int, S: int, bq: int, bk: int, nb: int, nh: int, dev: torch.device) -> torch.Tensor:
    """Tile states on a uniform grid: chunks of whole query tiles, contiguous reductions."""
    rows = max(bq, CHUNK_ELEMENTS // (nb * nh * S) // bq * bq)
    out_any, out_all = [], []
    with torch.no_grad():
        for a in range(0, L, rows):
            x_any, x_all = _call(fn, (a, min(a + rows, L)), (0, S), nb, nh, dev)  # (l, S)
            out_any.append(_blocks(_blocks(x_any, bk, 1, "any"), bq, 0, "any"))  # (t, nk)
            out_all.append(_blocks(_blocks(x_all, bk, 1, "all"), bq, 0, "all"))
    grid = TileGrid.uniform(L, S, bq, bk)
    return grid.states(full=torch.cat(out_all), empty=~torch.cat(out_any))


def _coarsen(fine: torch.Tensor, rq: int, rk: int) -> torch.Tensor:
    """Codes of a grid whose tiles are rq × rk tiles of ``fine`` (nq, nk): empty / full exactly when
    every part is."""
    nq, nk = -(-fine.shape[0] // rq), -(-fine.shape[1] // rk)

    def all_of(mask: torch.Tensor) -> torch.Tensor:
        padded = torch.ones(nq * rq, nk * rk, dtype=torch.bool)  # True: neutral for "all"
        padded[: fine.shape[0], : fine.shape[1]] = mask
        return padded.view(nq, rq, nk, rk).all(3).all(1)

    empty, full = all_of(fine == EMPTY), all_of(fine == FULL)
    return torch.where(empty, EMPTY, torch.where(full, FULL, PARTIAL)).to(torch.int8)


def _evaluate(fn: Callable, grid: TileGrid, nb: int, nh: int, dev: torch.device) -> torch.Tensor:
    """The tile states of any grid (tiles of any sizes, as ring attention's layouts cut them) by
    evaluating ``fn`` on every (query, key) pair the grid covers, in chunks of rows."""
    nq, nk = grid.shape
    tile_any = torch.zeros(nq, nk, dtype=torch.bool)
    tile_all = torch.ones(nq, nk, dtype=torch.bool)
    if nq == 0 or nk == 0:
        return grid.states(tile_all, ~tile_any)
    k_lo, k_hi = int(grid.k_start.min()), int(grid.k_end.max())
    ks, ke = grid.k_start - k_lo, grid.k_end - k_lo  # key tiles relative to the evaluated columns
    qs, qe = grid.q_start.tolist(), grid.q_end.tolist()
    q_lo, q_hi = min(qs), max(qe)
    rows = max(1, CHUNK_ELEMENTS // (nb * nh * (k_hi - k_lo)))
    with torch.no_grad():
        for a in range(q_lo, q_hi, rows):
            c = min(a + rows, q_hi)
            tiles = [i for i in range(nq) if qs[i] < c and qe[i] > a]  # query tiles meeting rows [a, c)
            if not tiles:
                continue
            rows_any, rows_all = _call(fn, (a, c), (k_lo, k_hi), nb, nh, dev)  # (l, S) over batch rows and heads
            col_any = torch.stack([rows_any[max(qs[i], a) - a : min(qe[i], c) - a].any(0) for i in tiles])  # (t, S)
            col_all = torch.stack([rows_all[max(qs[i], a) - a : min(qe[i], c) - a].all(0) for i in tiles])
            _, t_any = block_all_any(col_any, ks, ke)  # a tile is non-empty if any column is
            t_all, _ = block_all_any(col_all, ks, ke)  # full if every column is full
            idx = torch.tensor(tiles)
            tile_any[idx] |= t_any
            tile_all[idx] &= t_all
    return grid.states(full=tile_all, empty=~tile_any)


def _grid_key(grid: TileGrid) -> tuple:
    """The tile bounds as a hashable value: (block_q, block_kv) for a uniform grid, else every bound."""
    if grid.block is not None:
        return ("uniform", *grid.block)
    nq, nk = grid.shape
    uniform = TileGrid.uniform(grid.L, grid.S, max(1, int(grid.q_end[0] - grid.q_start[0])), max(1, int(grid.k_end[0] - grid.k_start[0])))
    if uniform.shape == (nq, nk) and all(
        torch.equal(x, y) for x, y in ((grid.q_start, uniform.q_start), (grid.q_end, uniform.q_end),
                                       (grid.k_start, uniform.k_start), (grid.k_end, uniform.k_end))
    ):
        return ("uniform", int(grid.q_end[0] - grid.q_start[0]), int(grid.k_end[0] - grid.k_start[0]))
    return tuple(tuple(t.tolist()) for t in (grid.q_start, grid.q_end, grid.k_start, grid.k_end))


def captured_tensors(fn: Callable) -> list[torch.Tensor]:
    """The tensors a function's closure, defaults or ``functools.partial`` arguments hold."""
    cells = getattr(fn, "__closure__", None) or ()
    values = [c.cell_contents for c in cells if cell_filled(c)]
    values += list(getattr(fn, "__defaults__", None) or ())
    values += list(getattr(fn, "args", ()) or ()) + list((getattr(fn, "keywords", None) or {}).values())  # functools.partial
    return [v for v in values if isinstance(v, torch.Tensor)]


# printing ----------------------------------------------------------------------------------------
_GLYPH = {EMPTY: "  ", FULL: "██", PARTIAL: "░░"}


@dataclass(frozen=True, eq=False)  # eq=False: a tensor field has no single truth value
class TileMap:
    """The tile states of one mask on a uniform grid, printable.

    codes: int8 (nq, nk) EMPTY / FULL / PARTIAL; the tiles are ``block_q`` queries × ``block_kv``
    keys of an (L, S) call (the last row / column possibly shorter)."""

    codes: torch.Tensor
    L: int
    S: int
    block_q: int
    block_kv: int
    name: str = "mask"

    def counts(self) -> dict[str, int]:
        """Number of tiles in each state."""
        return {s: int((self.codes == c).sum()) for s, c in (("empty", EMPTY), ("full", FULL), ("partial", PARTIAL))}

    def computed_fraction(self) -> float:
        """Fraction of the L × S area in tiles that are not skipped (100 % − FlexAttention's sparsity)."""
        grid = TileGrid.uniform(self.L, self.S, self.block_q, self.block_kv)
        area = (grid.q_end - grid.q_start).double()[:, None] * (grid.k_end - grid.k_start).double()[None, :]
        return float(area[self.codes != EMPTY].sum()) / (float(self.L) * float(self.S))

    def to_string(self, grid_size: int | tuple[int, int] = (20, 20)) -> str:
        """The grid, one character pair per tile, ``██`` full, ``░░`` partial, ``  `` empty. Grids
        wider or taller than ``grid_size`` show groups of tiles: ``██`` / ``  `` when every tile of
        the group is full / empty, else ``░░``; -1 prints every tile."""
        nq, nk = self.codes.shape
        if grid_size == -1:
            max_r, max_c = nq, nk
        elif isinstance(grid_size, int):
            max_r = max_c = grid_size
        else:
            max_r, max_c = grid_size
        rs, cs = -(-nq // max(1, max_r)), -(-nk // max(1, max_c))
        lines = []
        for r in range(0, nq, rs):
            row = ""
            for c in range(0, nk, cs):
                group = self.codes[r : r + rs, c : c + cs]
                code = EMPTY if bool((group == EMPTY).all()) else FULL if bool((group == FULL).all()) else PARTIAL
                row += _GLYPH[code]
            lines.append(row.rstrip())
        return "\n".join(lines)

    def __repr__(self) -> str:
        n = self.counts()
        nq, nk = self.codes.shape
        head = (
            f"TileMap({self.name}, L={self.L}, S={self.S}, block=({self.block_q}, {self.block_kv}), {nq}x{nk} tiles: "
            f"{n['full']} full, {n['partial']} partial, {n['empty']} empty; computed {100 * self.computed_fraction():.2f}%"
        )
        return head + ",\n" + self.to_string() + "\n)"
