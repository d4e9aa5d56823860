"""The base of every attention mask: :class:`Mask`, and :func:`as_mask` for what users pass as ``mask=``.

One polarity: ``True`` means *may attend*. Every mask is a predicate ``(b, h, q_idx, kv_idx) -> bool``
evaluated by broadcasting (see :mod:`attnkit.core.indices`), in the style of FlexAttention's
``mask_mod``. Masks compose with ``&``, ``|`` and ``~``; :meth:`Mask.materialize` turns one into a
dense bool tensor, and :meth:`Mask.tile_states` says for a whole grid of (query-block, key-block)
tiles which are empty, full or partial (:mod:`attnkit.core.tiles`), so blockwise and ring attention
skip work and inspect's tiled summaries skip tiles without building the (L, S) matrix. A mask kind
owns that logic: a new kind subclasses :class:`Mask` here, overrides ``tile_states`` (and the
properties ``positional``, ``band_width``, ``shift_invariant``, ``cache_key`` where they apply) and
every backend, cache and summary uses it.

The kinds (:mod:`.mask_kinds`, :mod:`.mask_values`, :mod:`.mask_algebra`, :mod:`.mask_chunked`,
:mod:`.mask_convert`) import this module; the public vocabulary is the facade
:mod:`attnkit.core.masks`, which imports them all. The few places here that build a kind (``&``,
``|``, ``~``, a bool tensor given as a mask, :func:`from_cache_key`) import it when they run.

Shape legend: B batch, H heads, L queries, S keys.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import torch

from .checks import require_positive_int
from .indices import index_grid
from .tiles import PARTIAL, TileGrid, TileState

if TYPE_CHECKING:
    from .tile_map import TileMap

Predicate = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
ALIGNS = ("top_left", "bottom_right")


class Mask:
    """Base class. Subclasses implement :meth:`predicate` and may implement :meth:`tile_states`.

    ``dims`` names the index dimensions the mask depends on (``"b"``, ``"h"``), so a materialized
    mask is (B or 1, H or 1, L, S) and no bigger than it must be.
    """

    dims: frozenset[str] = frozenset()

    def predicate(self, L: int, S: int) -> Predicate:  # pragma: no cover - abstract
        raise NotImplementedError

    def tile_states(self, grid: TileGrid) -> torch.Tensor:
        """(nq, nk) int8 codes EMPTY / FULL / PARTIAL of every tile of ``grid`` (see
        :mod:`attnkit.core.tiles`), across all batch rows and heads, vectorized over the grid.

        EMPTY or FULL only when proved; the default, all PARTIAL, is always correct (every tile is
        evaluated). Kinds that can prove more override this with a tensor expression over
        ``grid.q_first`` / ``q_last`` (nq, 1) and ``grid.k_first`` / ``k_last`` (1, nk)."""
        return grid.fill(PARTIAL)

    # what caches and tile planning need to know ---------------------------------------------
    @property
    def positional(self) -> bool:
        """True when the predicate reads only the query and key *positions* it is given (no tensor
        indexed by slot), so it stays right when q_idx / kv_idx are absolute token positions
        (KV caches, whose slots move) instead of indices."""
        return False

    @property
    def band_width(self) -> int | None:
        """An upper bound on how far apart (in key − query offset) two keys one query may attend
        can lie (a window's left + right + 1), or None when unbounded. Picks narrow tiles."""
        return None

    @property
    def shift_invariant(self) -> bool:
        """True when the mask on a tile depends only on key − query (and the tile's size), the same
        for every batch row and head, so evaluated tiles can be reused along a diagonal."""
        return False

    @property
    def cache_key(self) -> tuple | None:
        """A hashable value that fixes the mask completely (for caching per-shape plans), or None.
        Built-in kinds spell it ``(kind, *constructor arguments)`` so :func:`from_cache_key` can
        rebuild the mask from it (what ``torch.compile`` hands the blockwise tile planner)."""
        return None

    @property
    def batch_size(self) -> int | None:
        """The batch size this mask was built for, or None if it holds no per-sequence data."""
        return None

    @property
    def num_heads(self) -> int | None:
        """The head count this mask holds data for (a per-head tensor), or None."""
        return None

    # composition -------------------------------------------------------------------------------
    def __and__(self, other: "Mask") -> "Mask":
        from .mask_algebra import AndMask

        return AndMask(self, _as_mask(other, "other"))

    def __or__(self, other: "Mask") -> "Mask":
        from .mask_algebra import OrMask

        return OrMask(self, _as_mask(other, "other"))

    # reflected forms, so ``bool_tensor & mask`` works too: torch.Tensor.__and__ returns
    # NotImplemented for a non-tensor operand, and Python then asks the mask
    def __rand__(self, other: "Mask") -> "Mask":
        from .mask_algebra import AndMask

        return AndMask(_as_mask(other, "other"), self)

    def __ror__(self, other: "Mask") -> "Mask":
        from .mask_algebra import OrMask

        return OrMask(_as_mask(other, "other"), self)

    def __invert__(self) -> "Mask":
        # inside a torch.compile'd function spell it NotMask(m): Dynamo traces & and | between
        # masks but not ~ on a Python object (nor & / | with a bool tensor: wrap it in TensorMask)
        from .mask_algebra import NotMask

        return NotMask(self)

    # evaluation --------------------------------------------------------------------------------
    def materialize(
        self,
        L: int,
        S: int,
        *,
        batch: int | None = None,
        heads: int | None = None,
        device: torch.device | str | None = None,
    ) -> torch.Tensor:
        """Dense bool tensor (B or 1, H or 1, L, S); True = may attend."""
        require_positive_int("L", L)
        require_positive_int("S", S)
        return self.evaluate((0, L), (0, S), L, S, batch=batch, heads=heads, device=device)

    def evaluate(
        self,
        q_range: tuple[int, int],
        kv_range: tuple[int, int],
        L: int,
        S: int,
        *,
        batch: int | None = None,
        heads: int | None = None,
        device: torch.device | str | None = None,
    ) -> torch.Tensor:
        """The mask on one tile: bool (B or 1, H or 1, q1-q0, k1-k0)."""
        nb = (batch or self.batch_size or 1) if "b" in self.dims else 1
        nh = (heads or self.num_heads or 1) if "h" in self.dims else 1
        g = index_grid(q_range, kv_range, batch=nb, heads=nh, device=device)
        out = torch.as_tensor(self.predicate(L, S)(g.b, g.h, g.q, g.kv), device=g.q.device)
        if out.dtype != torch.bool:
            raise TypeError(f"mask predicate must return a bool tensor, got {out.dtype}; compare with >=, == etc.")
        shape = (nb, nh, q_range[1] - q_range[0], kv_range[1] - kv_range[0])
        return out.expand(shape)

    def tile_state(
        self,
        q_range: tuple[int, int],
        kv_range: tuple[int, int],
        L: int,
        S: int,
        *,
        batch: int | None = None,
        heads: int | None = None,
        device: torch.device | str | None = None,
    ) -> TileState:
        """Is tile ``q_range`` × ``kv_range`` empty, full or partial (across all batch rows and heads)?
        The analytic answer of :meth:`tile_states`, else the tile is evaluated (when values are readable)."""
        state = TileState(int(self.tile_states(TileGrid.single(q_range, kv_range, L, S))[0, 0]))
        if state is not TileState.PARTIAL:
            return state
        tile = self.evaluate(q_range, kv_range, L, S, batch=batch, heads=heads, device=device)
        if not values_readable(tile):
            return TileState.PARTIAL  # evaluate it: always correct, and needs no value here
        if bool(tile.all()):
            return TileState.FULL
        if not bool(tile.any()):
            return TileState.EMPTY
        return TileState.PARTIAL

    def tile_map(self, L: int, S: int, block_q: int = 128, block_kv: int = 128) -> "TileMap":
        """The (block_q × block_kv) tile grid of an (L, S) call, printable like FlexAttention's
        ``BlockMask``: ``print(masks.causal().tile_map(1024, 1024))`` shows ``██`` full tiles,
        ``░░`` partial ones (the mask is evaluated there) and blanks for tiles that are skipped."""
        from .tile_map import TileMap

        require_positive_int("L", L)
        require_positive_int("S", S)
        require_positive_int("block_q", block_q)
        require_positive_int("block_kv", block_kv)
        grid = TileGrid.uniform(L, S, block_q, block_kv)
        codes = self.tile_states(grid).expand(grid.shape).contiguous()
        return TileMap(codes, L, S, min(block_q, L), min(block_kv, S), repr(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def values_readable(*ts: torch.Tensor) -> bool:
    """Can Python branch on these tensors' values? Not on ``meta`` (there are none), nor while
    ``torch.compile`` / ``torch.export`` trace (a branch would break or specialize the graph).
    Analytic shortcuts and value checks that need values are skipped then; the safe path runs."""
    return not torch.compiler.is_compiling() and all(t.device.type != "meta" for t in ts)


def _as_mask(m: object, name: str) -> Mask:
    if isinstance(m, Mask):
        return m
    if isinstance(m, torch.Tensor):
        from .mask_values import TensorMask

        return TensorMask(m)
    if callable(m):  # FlexAttention's plain mask_mod (:mod:`attnkit.core.flex_callables`)
        from .flex_callables import mask_from_callable

        return mask_from_callable(m)
    raise TypeError(f"{name} must be an attnkit Mask, a bool tensor or a predicate (b, h, q_idx, kv_idx) -> bool, got {type(m).__name__}")


def as_mask(m: object) -> Mask | None:
    """Normalise what users pass as ``mask=``: None, a Mask, a bool tensor or a predicate."""
    return None if m is None else _as_mask(m, "mask")


def from_cache_key(key: tuple | None) -> Mask | None:
    """The mask a built-in :attr:`Mask.cache_key` describes, or None for a key of unknown kind.

    Under ``torch.compile`` a mask built inside the compiled function exists only as Dynamo's model
    of it, so code that must run in Python while tracing (the blockwise tile map, a constant of the
    graph) is handed the key, a tuple of Python constants, and rebuilds the mask from it."""
    if not isinstance(key, tuple) or not key:
        return None
    from .mask_algebra import AndMask, NotMask, OrMask
    from .mask_chunked import ChunkedMask
    from .mask_kinds import CausalMask, KeyPrefixMask, SlidingWindowMask

    kind, *args = key
    if kind in ("AndMask", "OrMask", "NotMask"):
        parts = [from_cache_key(a) for a in args]
        if any(p is None for p in parts):
            return None
        return {"AndMask": AndMask, "OrMask": OrMask, "NotMask": NotMask}[kind](*parts)
    cls = {"causal": CausalMask, "sliding_window": SlidingWindowMask, "chunked": ChunkedMask, "key_prefix": KeyPrefixMask}.get(kind)
    return None if cls is None else cls(*args)


__all__ = ["ALIGNS", "Mask", "Predicate", "as_mask", "from_cache_key", "values_readable"]
