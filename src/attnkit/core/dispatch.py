"""Choosing a backend for a call, and saying why.

A forced backend that cannot serve the call raises with its reason. ``auto`` considers every exact
backend that supports the call (approximate ones, like ``linear``, are never picked). When all of
them can estimate their cost (:mod:`attnkit.core.cost`) it keeps those whose estimated extra memory
fits the budget (``set_memory_budget`` or ``memory_budget=`` per call) and picks the fastest; a
backend must be estimated at least ``MARGIN`` faster than a more preferred one to displace it, so
model error never trades SDPA's fused kernel for a near-tie. If nothing fits, the backend with the
smallest estimated memory runs and the report says so. Without estimates, the most preferred by
priority wins (sdpa before blockwise before reference) — also while ``torch.compile`` /
``torch.export`` trace the call and on ``meta`` tensors, where the cost model's tile maps (tensors
built from the mask's data) cannot be read.

A forced backend always runs; when its estimate exceeds the memory budget the report says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from . import options as _options
from . import registry
from .output import Report

if TYPE_CHECKING:
    from .call import AttentionCall

MARGIN = 1.10  # a less preferred backend must be estimated this many times faster to be chosen


def _check_budget(name: str, nbytes: object) -> int | None:
    if nbytes is not None and (isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0):
        raise ValueError(f"{name} must be a positive int of bytes or None (no limit), got {nbytes!r}; e.g. 2 * 2**30 for 2 GiB")
    return nbytes


def set_memory_budget(nbytes: int | None) -> None:
    """Process-wide default cap (bytes) on the extra memory ``auto`` may plan for; None removes it.

    ``with attnkit.options(memory_budget=...)`` overrides it for one thread / context only."""
    _options.set_defaults(memory_budget=_check_budget("memory budget", nbytes))


def get_memory_budget() -> int | None:
    """The memory budget in effect here (a context's ``options(memory_budget=...)`` over the default)."""
    return _options.current().memory_budget


def _values_readable(call: "AttentionCall") -> bool:
    """Can the cost model read the call's mask data (not while tracing, not on meta)?"""
    return not torch.compiler.is_compiling() and call.q.device.type != "meta"


def _fmt(e: dict[str, float]) -> str:
    return f"{e['time_s'] * 1e3:.2f} ms, {_mib(e['bytes'])}"


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def choose(call: "AttentionCall", backend: str) -> tuple[registry.Backend, Report]:
    if backend != "auto":
        b = registry.get(backend)
        why = b.supports(call)
        if why is not None:
            raise ValueError(f"backend={backend!r} cannot serve this call: {why}; use backend='auto' or change the call")
        why = "forced by backend=" + repr(backend)
        if not b.exact:
            why += "; approximate: not exact softmax attention"
        budget = call.memory_budget if call.memory_budget is not None else get_memory_budget()
        estimates = {}
        if budget is not None and b.estimate is not None and _values_readable(call):
            estimates[b.name] = e = b.estimate(call)
            if e["bytes"] > budget:
                # a forced backend runs anyway (the user asked for it), but must not hide that it overshoots
                why += f"; over memory budget {_mib(budget)}: estimated {_fmt(e)} (the budget only steers backend='auto')"
        return b, Report(b.name, why, exact=b.exact, estimates=estimates)

    rejected: dict[str, str] = {}
    candidates: list[registry.Backend] = []
    for b in registry.available():
        if not b.exact:
            rejected[b.name] = "approximate (not exact softmax attention); auto picks only exact backends, ask for it by name"
            continue
        why = b.supports(call)
        if why is None:
            candidates.append(b)
        else:
            rejected[b.name] = why
    if not candidates:
        raise ValueError("no registered backend can serve this call: " + "; ".join(f"{k}: {v}" for k, v in rejected.items()))

    budget = call.memory_budget if call.memory_budget is not None else get_memory_budget()
    _check_budget("memory_budget", budget)
    if not _values_readable(call):
        # the cost model reads mask tile maps as tensors: data-dependent floats a traced graph cannot
        # branch on, and no data at all on meta; take the most preferred backend instead
        where = "torch.compile / torch.export trace" if torch.compiler.is_compiling() else "meta tensors"
        best = candidates[0]
        for b in candidates[1:]:
            rejected[b.name] = f"supported, but {best.name} is preferred (no cost model under {where})"
        return best, Report(best.name, f"most preferred backend that supports the call ({where}: no cost model)", rejected=rejected, exact=best.exact)
    estimates = {b.name: b.estimate(call) for b in candidates if b.estimate is not None}
    if len(estimates) == len(candidates) and len(candidates) > 1:
        fitting = [b for b in candidates if budget is None or estimates[b.name]["bytes"] <= budget]
        if fitting:
            fastest = min(estimates[b.name]["time_s"] for b in fitting)
            near = [b for b in fitting if estimates[b.name]["time_s"] <= fastest * MARGIN]
            best = max(near, key=lambda b: (b.priority, -estimates[b.name]["time_s"]))
            why = f"lowest estimated time ({_fmt(estimates[best.name])})"
            if estimates[best.name]["time_s"] > fastest:
                why = f"preferred and within {MARGIN:.2f}x of the fastest estimate ({_fmt(estimates[best.name])})"
            if budget is not None:
                why += f" within memory budget {_mib(budget)}"
        else:
            best = min(candidates, key=lambda b: (estimates[b.name]["bytes"], estimates[b.name]["time_s"]))
            why = f"nothing fits memory budget {_mib(budget)}; smallest estimated memory ({_fmt(estimates[best.name])})"
        for b in candidates:
            if b is not best:
                e = estimates[b.name]
                over = budget is not None and e["bytes"] > budget
                rejected[b.name] = f"estimated {_fmt(e)}" + (" (over memory budget)" if over else " (slower)")
    else:
        best = candidates[0]
        why = "most preferred backend that supports the call"
        for b in candidates[1:]:
            rejected[b.name] = f"supported, but {best.name} is preferred"
    return best, Report(best.name, why, rejected=rejected, exact=best.exact, estimates=estimates)
