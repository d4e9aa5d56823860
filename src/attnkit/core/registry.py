"""The backend registry: each backend is a plain function with one signature.

``run(call: AttentionCall) -> BackendResult`` computes attention; ``supports(call) -> str | None``
returns the reason it cannot serve a call, or None. ``exact`` says whether it computes softmax
attention exactly (the linear/kernelized backend does not, and ``auto`` never picks it).
``estimate(call) -> {"time_s": .., "bytes": ..}`` is optional and feeds cost-model dispatch; a
backend without one is ranked by priority against the cost model's choice (:func:`attnkit.core.cost.rank`).

The built-in backends register themselves when ``attnkit`` imports :mod:`attnkit.backends`; this
module (like all of the core) imports no backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from .call import AttentionCall
    from .output import BackendResult

RunFn = Callable[["AttentionCall"], "BackendResult"]
SupportsFn = Callable[["AttentionCall"], "str | None"]
EstimateFn = Callable[["AttentionCall"], "dict[str, float]"]


@dataclass(frozen=True)
class Backend:
    name: str
    run: RunFn
    supports: SupportsFn
    exact: bool = True
    estimate: EstimateFn | None = None
    priority: int = 0  # order of preference when no cost model decides: higher first


_REGISTRY: dict[str, Backend] = {}
_SORTED: tuple[Backend, ...] | None = None  # available()'s order, rebuilt after (un)registering
_GENERATION = [0]  # bumped by every (un)register: caches of past choices (core.call_cache) key on it


def register(
    name: str,
    run: RunFn,
    *,
    supports: SupportsFn | None = None,
    exact: bool = True,
    estimate: EstimateFn | None = None,
    priority: int = 0,
) -> Backend:
    """Register (or replace) a backend under ``name``."""
    if not isinstance(name, str) or not name or name == "auto":
        raise ValueError(f"backend name must be a non-empty string other than 'auto', got {name!r}")
    if not callable(run):
        raise TypeError(f"run must be callable (call) -> BackendResult, got {type(run).__name__}")
    global _SORTED
    b = Backend(name, run, supports or _serves_all, exact, estimate, priority)
    _REGISTRY[name] = b
    _SORTED = None
    _GENERATION[0] += 1
    return b


def _serves_all(call: "AttentionCall") -> None:
    return None


def unregister(name: str) -> None:
    global _SORTED
    _REGISTRY.pop(name, None)
    _SORTED = None
    _GENERATION[0] += 1


def generation() -> int:
    """A counter that changes whenever a backend is registered or unregistered."""
    return _GENERATION[0]


def get(name: str) -> Backend:
    if name not in _REGISTRY:
        raise ValueError(f"backend must be 'auto' or one of {sorted(_REGISTRY)}, got {name!r}")
    return _REGISTRY[name]


def available() -> list[Backend]:
    """All registered backends, most preferred first."""
    global _SORTED
    if _SORTED is None:
        _SORTED = tuple(sorted(_REGISTRY.values(), key=lambda b: -b.priority))  # stable: ties keep registration order
    return list(_SORTED)

