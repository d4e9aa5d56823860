r"""The one interface every blockwise route implements.

A *route* is one way to run a blockwise call: the Python tile loop, or PyTorch's fused CPU kernel
driven a particular way (one call, a causal merge, banded windows, per-segment calls, a bias as the
kernel's float mask). :data:`attnkit.backends.blockwise.routes.ROUTES` lists them in priority
order; the runner (:mod:`attnkit.backends.blockwise`) and the cost estimate ``auto`` reads
(:mod:`attnkit.backends.blockwise.cost`) both walk that one list, so the path ``auto`` names is the
one that runs. A route is:

* ``name``: the path name the report shows (``report.reason``'s "path: ...");
* ``applies(call) -> bool``: cheap, reads no tensor values (shapes, dtypes, kinds of mask and bias);
* ``plan(call) -> object | None``: the route's data for the call (a band's geometry, a mask's
  segments, a bias's offsets), kept in a cache by the routes whose plan costs work; None declines
  the call after all (tile states unreadable, a bias value not finite), and the next route is asked;
* ``estimate(call) -> Estimate | None``: time and bytes in :mod:`attnkit.core.cost`'s units, with
  ``"path": name``; None declines as ``plan`` does;
* ``forward(call, plan, q, k, v) -> (out, lse)`` and ``backward(call, plan, dout, q, k, v, out,
  lse, dlse, need) -> (dq, dk, dv)``: the computation, inside an autograd function;
* ``run(call, plan, seed) -> BackendResult``: the call on this route (:class:`KernelRoute` and
  :class:`BiasRoute` give it; the tile loop has its own).

:class:`KernelRoute` is the base of the mask routes (no bias): autograd by
:class:`..kernel.function.KernelFunction`, estimates cached per plan and shapes.
:class:`BiasRoute` is the base of the additive-bias routes: autograd by
:class:`..kernel.bias_function.BiasFunction` (the tile loop's backward), and the tile loop instead
where an input is not provably harmless under the mask.

Shape legend: B batch, H query heads, L queries, S keys, E/Ev head dims.
"""

from __future__ import annotations

import dataclasses
import threading

import torch

from ....core import cost
from ....core.output import BackendResult
from ...sdpa_mask_cache import dead_keys_inert
from ...tiling import default_tiles
from ..kernel.bias_function import BiasFunction
from ..kernel.function import KernelFunction
from ..loop.params import bias_tensors
from ..loop.run import run_tile_loop

__all__ = ["Route", "KernelRoute", "BiasRoute", "kernel_time", "ESTIMATE_ENTRIES"]


class Route:
    """The interface (module docstring); subclasses set ``name`` and override what they serve."""

    name = ""

    def applies(self, call) -> bool:
        raise NotImplementedError

    def plan(self, call):
        raise NotImplementedError

    def estimate(self, call) -> cost.Estimate | None:
        raise NotImplementedError

    def forward(self, call, plan, q, k, v):
        raise NotImplementedError(f"route {self.name!r} runs its own forward (see its run)")

    def backward(self, call, plan, dout, q, k, v, out, lse, dlse, need):
        raise NotImplementedError(f"route {self.name!r} runs its own backward (see its run)")

    def run(self, call, plan, seed: int | None) -> BackendResult:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<route {self.name!r}>"


def _default_tile_loop(call, seed: int | None):
    """The call on the tile loop with its default tiles (a fused route's fallback)."""
    bq, bk = default_tiles(call.mask, call.L, call.S, call.q.dtype, call.q.device)
    return run_tile_loop(call, bq, bk, seed)


class KernelRoute(Route):
    """A mask route (no bias) on the fused kernel: subclasses give ``applies``, ``plan``,
    ``forward``, ``backward`` and ``work`` (what :func:`kernel_time` needs)."""

    def run(self, call, plan, seed: int | None) -> BackendResult:
        def tile_loop(q, k, v):  # double backward only: the tile loop under autograd
            res = _default_tile_loop(dataclasses.replace(call, q=q, k=k, v=v), None)
            return res.out, res.lse

        out, lse = KernelFunction.apply(self, call, plan, tile_loop, call.q, call.k, call.v)
        return BackendResult(out, None, lse, torch.isneginf(lse).sum(), [], route=self.name)

    def work(self, call, plan) -> tuple[float, int, float, float, float]:
        """(pairs computed, kernel calls, flop rate, extra bytes, extra seconds) of the call on this route."""
        raise NotImplementedError

    def estimate(self, call) -> cost.Estimate | None:
        """:meth:`work` turned into time and bytes, kept per (route, plan, shapes, dtype, device's
        rates): a model repeats the same call in every layer, and for tiny calls working the
        estimate out (a band's chunks and edges) took ~20 µs (window, n = 64), a sixth of SDPA's
        whole kernel there. A plan is compared by value, or by identity where it is a large one the
        route cache hands out once per mask and shape (:meth:`plan_key`)."""
        plan = self.plan(call)
        if plan is None:
            return None
        B, H, _, L, S, E, Ev = cost.dims(call)
        mask_extent = 0 if call.mask is None else cost.extent(call.mask, B, H, 1, 1)
        key = (self.name, self.plan_key(plan), B, H, L, S, E, Ev, call.q.dtype, mask_extent, cost.current_device())
        with _LOCK:
            hit = _ESTIMATES.get(key)
        if hit is not None and (hit[0] is plan or hit[0] == plan):
            return dict(hit[1])  # a copy: the report hands estimates to users
        est = kernel_time(call, self.name, *self.work(call, plan))
        with _LOCK:
            _ESTIMATES[key] = (plan, dict(est))  # holds the plan: an id in its key is not reused meanwhile
            while len(_ESTIMATES) > ESTIMATE_ENTRIES:
                _ESTIMATES.pop(next(iter(_ESTIMATES)))  # oldest first
        return est

    def plan_key(self, plan):
        """The plan's part of the estimate cache's key: the plan itself (small, hashable values)."""
        return plan


ESTIMATE_ENTRIES = 256  # mask-route estimates kept
_ESTIMATES: dict[tuple, tuple[object, cost.Estimate]] = {}
_LOCK = threading.Lock()


def kernel_time(call, path: str, computed: float, calls: int, rate: float, extra_bytes: float,
                extra_s: float = 0.0) -> cost.Estimate:
    """Time and bytes of ``calls`` kernel calls computing ``computed`` query-key pairs at ``rate``
    flop/s, plus ``extra_s`` seconds; memory: the output, the lse and ``extra_bytes``."""
    B, H, _, L, S, E, Ev = cost.dims(call)
    out_bytes = B * H * L * Ev * call.q.element_size() + B * H * L * 4
    time_s = cost.RATES["call_overhead_s"]["blockwise_fused"] + calls * cost.RATES["fused_call_overhead_s"]
    time_s += 2 * computed * (E + Ev) / rate + extra_s
    return {"time_s": time_s, "bytes": float(out_bytes + extra_bytes), "path": path}


class BiasRoute(Route):
    """An additive-bias route on the fused kernel: subclasses give ``applies``, ``plan``,
    ``estimate`` and ``forward``; the backward is the tile loop's (:class:`BiasFunction`)."""

    def run(self, call, plan, seed: int | None) -> BackendResult:
        """The call on this route; the tile loop serves it instead when an input is not provably
        harmless where the mask hides it (:func:`attnkit.backends.sdpa_mask_cache.dead_keys_inert`:
        every value finite and every |q·k| · scale far below overflow)."""
        if not dead_keys_inert(call, call.q, call.k, call.v):
            # a huge or infinite value in a key or query row the mask hides would meet the kernel's -inf
            # as inf - inf = NaN; the tile loop zeroes such rows first (..loop.leaks)
            return _default_tile_loop(call, seed)
        params = bias_tensors(call)
        out, lse = BiasFunction.apply(self, call, plan, call.q, call.k, call.v, *params)
        return BackendResult(out, None, lse, torch.isneginf(lse).sum(), [], route=self.name)
