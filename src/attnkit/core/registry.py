"""The backend registry: each backend is a plain function with one signature.

``run(call: AttentionCall) -> BackendResult`` computes attention; ``supports(call) -> str | None``
returns the reason it cannot serve a call, or None. ``exact`` says whether it computes softmax
attention exactly (the linear/kernelized backend does not, and ``auto`` never picks it).
``estimate(call) -> {"time_s": .., "bytes": ..}`` is optional and feeds cost-model dispatch.
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
    b = Backend(name, run, supports or (lambda call: None), exact, estimate, priority)
    _REGISTRY[name] = b
    return b


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def get(name: str) -> Backend:
    _ensure_builtin()
    if name not in _REGISTRY:
        raise ValueError(f"backend must be 'auto' or one of {sorted(_REGISTRY)}, got {name!r}")
    return _REGISTRY[name]


def available() -> list[Backend]:
    """All registered backends, most preferred first."""
    _ensure_builtin()
    return sorted(_REGISTRY.values(), key=lambda b: -b.priority)


def _ensure_builtin() -> None:
    # importing attnkit.backends registers the built-in backends exactly once
    import attnkit.backends  # noqa: F401
