"""Choosing a backend for a call, and saying why.

A forced backend that cannot serve the call raises with its reason. ``auto`` considers every exact
backend that supports the call (approximate ones, like ``linear``, are never picked) and lets
:func:`attnkit.core.cost.rank` choose: among backends with a cost estimate, the fastest whose
estimated extra memory fits the budget (``set_memory_budget`` or ``memory_budget=`` per call),
unless a more preferred one is within ``cost.MARGIN`` (1.10×) of it; a backend without an
estimate is ranked by priority against that choice. If nothing fits, the smallest estimated
memory runs and the report says so. While ``torch.compile`` / ``torch.export`` trace the call and on ``meta`` tensors,
where the cost model's tile maps (tensors built from the mask's data) cannot be read, the most
preferred backend by priority wins (sdpa before blockwise before reference).

A forced backend always runs; when its estimate exceeds the memory budget the report says so.

Formatting the report's sentences is part of ``auto``'s fixed cost per call, which tiny calls feel
(``benchmarks/auto_overhead.py``), so ``auto`` builds them only when ``report.reason`` or
``report.rejected`` is first read (:class:`_DeferredReport`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from . import cost
from . import options as _options
from . import registry
from .output import Report

if TYPE_CHECKING:
    from .call import AttentionCall

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


class _DeferredReport(Report):
    """A :class:`Report` whose ``reason`` and ``rejected`` are built by ``explain()`` on first read.

    Same fields, equality and printing as a Report (the dataclass methods read the attributes);
    assigning either one first builds both, so ``report.reason += "..."`` works as on a Report."""

    def __init__(self, backend: str, explain, rejected: dict[str, str], *, exact: bool, estimates: dict):
        self.backend, self.exact, self.estimates = backend, exact, estimates
        self.materialized, self.fully_masked_rows = [], None
        self._explain, self._unsupported = explain, rejected  # reasons the backends gave (already strings)
        self._reason: str | None = None
        self._rejected: dict[str, str] | None = None

    def _build(self) -> None:
        if self._explain is not None:
            why, passed_over = self._explain()
            self._reason, self._rejected = why, {**self._unsupported, **passed_over}
            self._explain = None  # last: a thread that sees None finds both fields set

    def __getstate__(self) -> dict:
        self._build()  # pickle the sentences, not the closure that would build them
        return self.__dict__

    @property
    def reason(self) -> str:
        self._build()
        return self._reason

    @reason.setter
    def reason(self, value: str) -> None:
        self._build()
        self._reason = value

    @property
    def rejected(self) -> dict[str, str]:
        self._build()
        return self._rejected

    @rejected.setter
    def rejected(self, value: dict[str, str]) -> None:
        self._build()
        self._rejected = value


def fresh_report(report: Report) -> Report:
    """A copy of the report :func:`choose` gave, as it was then, for another call of the same
    signature (:mod:`attnkit.core.call_cache`): its own estimates and lists (callers append to the
    reason and the materialized list). A deferred report stays deferred: its sentences are built
    from the estimates the choice was made with, which no report exposes (:func:`choose`)."""
    estimates = {name: dict(e) for name, e in report.estimates.items()}
    if isinstance(report, _DeferredReport) and report._explain is not None:
        return _DeferredReport(report.backend, report._explain, report._unsupported, exact=report.exact, estimates=estimates)
    return Report(report.backend, report.reason, dict(report.rejected), exact=report.exact, estimates=estimates)


def choose(call: "AttentionCall", backend: str) -> tuple[registry.Backend, Report]:
    if backend != "auto":
        b = registry.get(backend)
        why = b.supports(call)
        if why is None and call.sinks is not None and not b.exact:
            why = "attention sinks scale exact softmax rows by sigmoid(lse - sink); an approximate backend has no such lse"
        if why is not None:
            raise ValueError(f"backend={backend!r} cannot serve this call: {why}; use backend='auto' or change the call")
        why = "forced by backend=" + repr(backend)
        if not b.exact:
            why += "; approximate: not exact softmax attention"
        budget = call.memory_budget if call.memory_budget is not None else get_memory_budget()
        estimates = {}
        if budget is not None and b.estimate is not None and _values_readable(call):
            with cost.on_device(call.q.device):
                estimates[b.name] = e = b.estimate(call)
            if e["bytes"] > budget:
                # a forced backend runs anyway (the user asked for it), but must not hide that it overshoots
                why += f"; over memory budget {cost.mib(budget)}: estimated {cost.describe(e)} (the budget only steers backend='auto')"
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
    if call.q.device.type == cost.current_device():  # already reading this device's rates: no context switch
        estimates = {b.name: b.estimate(call) for b in candidates if b.estimate is not None}
    else:
        with cost.on_device(call.q.device):  # the rates of the device the call runs on
            estimates = {b.name: b.estimate(call) for b in candidates if b.estimate is not None}
    best, explain = cost.rank(candidates, estimates, budget)
    # the report gets a copy: explain() reads the estimates later, and an edit of report.estimates
    # must not change the sentences of this or a later report of the same signature (fresh_report)
    shown = {name: dict(e) for name, e in estimates.items()}
    return best, _DeferredReport(best.name, explain, rejected, exact=best.exact, estimates=shown)
