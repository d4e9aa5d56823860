"""The blockwise backend's cost estimate: time and extra bytes of one call, for ``auto`` dispatch.

Terms and rates are the shared ones of :mod:`attnkit.core.cost`. The estimate is that of the route
the runner would take: the first of :data:`.routes.ROUTES` that applies and does not decline the
call, each route's estimate sitting beside it in its module (the tile loop's in
:mod:`.routes.tile_loop`). The estimate names the path (``"path"``), which ``auto``'s report
repeats.

Shape legend: B batch, H heads, L queries, S keys, E/Ev head dims.
"""

from __future__ import annotations

from ...core import cost
from ...core.call import AttentionCall
from . import routes

__all__ = ["estimate"]


def estimate(call: AttentionCall) -> cost.Estimate:
    return routes.estimated(call)[1]
