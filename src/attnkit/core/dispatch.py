"""Choosing a backend for a call, and saying why.

A forced backend that cannot serve the call raises with its reason. ``auto`` considers every exact
backend that supports the call; when all of them can estimate cost it picks the fastest within the
memory budget, otherwise the most preferred by priority (sdpa before reference).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import registry
from .output import Report

if TYPE_CHECKING:
    from .call import AttentionCall

_MEMORY_BUDGET: list[int | None] = [None]


def set_memory_budget(nbytes: int | None) -> None:
    """Global cap (bytes) on the extra memory ``auto`` may plan for; None removes it."""
    if nbytes is not None and (isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0):
        raise ValueError(f"memory budget must be a positive int of bytes or None, got {nbytes!r}")
    _MEMORY_BUDGET[0] = nbytes


def get_memory_budget() -> int | None:
    return _MEMORY_BUDGET[0]


def choose(call: "AttentionCall", backend: str) -> tuple[registry.Backend, Report]:
    if backend != "auto":
        b = registry.get(backend)
        why = b.supports(call)
        if why is not None:
            raise ValueError(f"backend={backend!r} cannot serve this call: {why}; use backend='auto' or change the call")
        return b, Report(b.name, "forced by backend=" + repr(backend), exact=b.exact)

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
    estimates = {b.name: b.estimate(call) for b in candidates if b.estimate is not None}
    if len(estimates) == len(candidates) and len(candidates) > 1:
        fitting = [b for b in candidates if budget is None or estimates[b.name]["bytes"] <= budget]
        pool = fitting or candidates
        best = min(pool, key=lambda b: (estimates[b.name]["time_s"], -b.priority))
        why = f"lowest estimated time ({estimates[best.name]['time_s'] * 1e3:.2f} ms)"
        if budget is not None:
            why += f" within memory budget {budget:,} B" if fitting else f"; nothing fits memory budget {budget:,} B, so fastest"
        for b in candidates:
            if b is not best:
                e = estimates[b.name]
                over = budget is not None and e["bytes"] > budget
                rejected[b.name] = f"estimated {e['time_s'] * 1e3:.2f} ms, {e['bytes']:,} B" + (" (over memory budget)" if over else " (slower)")
    else:
        best = candidates[0]
        why = "most preferred backend that supports the call"
        for b in candidates[1:]:
            rejected[b.name] = f"supported, but {best.name} is preferred"
    return best, Report(best.name, why, rejected=rejected, exact=best.exact, estimates=estimates)
