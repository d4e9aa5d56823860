"""The mask route a blockwise call takes, bound to the call, for tests that read its plan or run
its forward directly (:mod:`attnkit.backends.blockwise.routes`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from attnkit.backends.blockwise.routes import KernelRoute, planned


@dataclass
class Bound:
    """``route`` with its ``plan`` for ``call``; ``kind`` is the route's module name ("band", ...)."""

    route: KernelRoute
    call: object = field(compare=False)
    plan: object

    @property
    def kind(self) -> str:
        return type(self.route).__module__.rsplit(".", 1)[1]

    @property
    def scale(self) -> float:
        return self.call.scale

    @property
    def band(self):
        assert self.kind == "band", self.kind
        return self.plan

    @property
    def segments(self):
        assert self.kind == "tiles", self.kind
        return self.plan

    @property
    def causal_off(self):
        return None if self.kind == "dense" else self.plan

    def forward(self, q, k, v):
        return self.route.forward(self.call, self.plan, q, k, v)


def route_of(call) -> Bound | None:
    """The mask route (no bias) that serves ``call``, or None when another route (the tile loop, a
    bias route) does."""
    route, plan = planned(call)
    return Bound(route, call, plan) if isinstance(route, KernelRoute) else None
