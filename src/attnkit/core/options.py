"""Options that steer how a call runs: process-wide defaults and context-local overrides.

Three knobs exist: ``memory_budget`` (bytes of extra memory ``auto`` may plan for), ``block_q`` and
``block_kv`` (the blockwise backend's tile sizes). ``None`` means "no limit" / "automatic".

* ``set_defaults(...)`` (and the older setters ``set_memory_budget`` / ``set_tile_sizes`` built on it)
  changes the process-wide defaults, seen by every thread.
* ``with attnkit.options(memory_budget=..., block_q=...):`` overrides them only for the code run in
  that context. It is stored in a :mod:`contextvars` variable, so another thread (each thread starts
  with its own context) or another asyncio task never sees it, and nesting restores on exit.

``current()`` gives the effective options: the innermost ``options(...)`` value of each field that was
set there, otherwise the process default.

Under ``torch.compile`` the options are read once, when the graph is traced (Dynamo cannot trace a
context variable), and baked into the graph like any constant: a compiled function keeps the backend
and tiles it was traced with. Pass ``memory_budget=`` to the call, or ``torch._dynamo.reset()``, to
change them for compiled code.

>>> import attnkit
>>> with attnkit.options(block_q=64):
...     attnkit.core.options.current().block_q
64
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import threading
from collections.abc import Iterator

import torch

__all__ = ["Options", "current", "options", "set_defaults", "defaults"]


@dataclasses.dataclass(frozen=True)
class Options:
    """The effective options of a call (``None``: no limit / automatic)."""

    memory_budget: int | None = None
    block_q: int | None = None
    block_kv: int | None = None


_FIELDS = tuple(f.name for f in dataclasses.fields(Options))

_DEFAULTS: list[Options] = [Options()]  # one cell, replaced atomically, so readers never see half an update
_DEFAULTS_LOCK = threading.Lock()  # two set_defaults calls must not lose each other's fields
# the fields overridden in this context (never mutated: each options(...) layer sets a new dict)
_LOCAL: contextvars.ContextVar[dict[str, object]] = contextvars.ContextVar("attnkit_options", default={})

_HINT = {
    "memory_budget": "a positive int of bytes or None (no limit), e.g. 2 * 2**30 for 2 GiB",
    "block_q": "a positive int tile size or None (automatic), e.g. 128",
    "block_kv": "a positive int tile size or None (automatic), e.g. 128",
}


def _validate(kw: dict[str, object]) -> None:
    for name, v in kw.items():
        if name not in _FIELDS:
            raise ValueError(f"unknown option {name!r}; valid options are {', '.join(_FIELDS)}")
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
            raise ValueError(f"{name} must be {_HINT[name]}, got {v!r}")


def defaults() -> Options:
    """The process-wide defaults (ignoring any ``options(...)`` context)."""
    return _DEFAULTS[0]


def set_defaults(**kw: int | None) -> None:
    """Change process-wide defaults for the given fields only, e.g. ``set_defaults(memory_budget=None)``."""
    _validate(kw)
    with _DEFAULTS_LOCK:
        _DEFAULTS[0] = dataclasses.replace(_DEFAULTS[0], **kw)


def current() -> Options:
    """The effective options here: context overrides over process defaults."""
    if torch.compiler.is_compiling():
        from . import traced  # loads torch._dynamo, already loaded while tracing

        return Options(*traced.constant(_traced_values))
    return _current()


def _traced_values() -> tuple[int | None, ...]:
    # read outside the graph while tracing (Dynamo cannot trace ContextVar.get); a tuple of
    # ints/None is a constant Dynamo can bake in
    o = _current()
    return tuple(getattr(o, f) for f in _FIELDS)


def _current() -> Options:
    local = _LOCAL.get()
    base = _DEFAULTS[0]
    if not local:
        return base
    return dataclasses.replace(base, **local)  # only the fields some options(...) named; None there means "none"


@contextlib.contextmanager
def options(**kw: int | None) -> Iterator[Options]:
    """Override options for the code inside the ``with`` block (this thread / task only).

    Fields not named keep their outer value; ``None`` explicitly means no limit / automatic.
    Yields the effective :class:`Options`.
    """
    _validate(kw)
    token = _LOCAL.set({**_LOCAL.get(), **kw})
    try:
        yield current()
    finally:
        _LOCAL.reset(token)
