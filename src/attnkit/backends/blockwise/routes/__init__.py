"""The blockwise routes, in priority order: :data:`ROUTES`, the one list the runner
(:func:`attnkit.backends.blockwise.run`, through :func:`planned`) and the cost estimate ``auto``
reads (:func:`attnkit.backends.blockwise.cost.estimate`, through :func:`estimated`) both walk, so
the path a report names is the path that ran. Each route is one module with its estimate beside it; the interface is
:mod:`.base`.

The order: the mask routes (no bias) from the most specific mask kind to any mask that does not
read the head, then the bias routes (a relative bias before any additive one), then the tile
loop, which serves every call. A new route is one module and one line here (tests may insert one
and remove it again: the list is read at every call).

Shape legend: B batch, H query heads, L queries, S keys, E/Ev head dims.
"""

from __future__ import annotations

from .band import BAND
from .base import BiasRoute, KernelRoute, Route
from .causal import CAUSAL
from .custom import CUSTOM
from .dense import DENSE
from .prefix_lm import PREFIX_LM
from .relative import RELATIVE
from .tile_loop import TILE_LOOP
from .tiles import TILES

__all__ = ["ROUTES", "Route", "KernelRoute", "BiasRoute", "planned", "estimated", "TILE_LOOP"]

ROUTES: list[Route] = [
    DENSE,  # no mask: one kernel call
    CAUSAL,  # causal: is_causal, a cached prefix merged by log-sum-exp
    BAND,  # a window bounded on both sides: batched query blocks against strided key windows
    PREFIX_LM,  # prefix-LM with an int prefix: an unmasked and a causal call
    TILES,  # any other mask not reading the head: per block and segment of tiles
    RELATIVE,  # ALiBi, T5, Shaw under no mask or a mask of key - query: the bias as a view of its offsets
    CUSTOM,  # any other additive bias: evaluated per key chunk as the kernel's float mask
    TILE_LOOP,  # everything else: the Python tile loop
]


def planned(call) -> tuple[Route, object]:
    """(route, plan): the first route of :data:`ROUTES` that applies to ``call`` and whose plan does
    not decline it (None). The runner's choice."""
    return _first(call, lambda route: route.plan(call))


def estimated(call) -> tuple[Route, dict]:
    """(route, estimate): the first route of :data:`ROUTES` that applies to ``call`` and whose estimate
    does not decline it (None); a route may estimate without planning. What ``auto`` weighs."""
    return _first(call, lambda route: route.estimate(call))


def _first(call, ask):
    for route in ROUTES:  # read at every call: a route inserted into the list is asked from then on
        if route.applies(call):
            got = ask(route)
            if got is not None:
                return route, got
    raise RuntimeError("no blockwise route served the call: ROUTES must end in the tile loop, which applies to every call")
