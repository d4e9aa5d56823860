"""Observer hook point of :func:`attnkit.attention`, and the "which module is calling" scope.

Inspection must not change what runs. So instead of a ``return_weights`` flag threaded through every
model, :func:`attnkit.attention` tells the registered observers about each finished call — the
validated :class:`~attnkit.core.call.AttentionCall` (q, k, v, score, mask, bias, scale) and its
:class:`~attnkit.core.output.AttentionOutput` — *after* the chosen backend has produced the output.
An observer (e.g. :func:`attnkit.inspect.capture`) can then recompute whatever it wants to record
from the call; the model's output and its backend are untouched.

Calls do not know which layer they belong to, so a second, independent piece is a stack of
modules in a :class:`contextvars.ContextVar`: a model (or a capture's forward hooks) pushes the
attention module around the call with :func:`scope`, and observers read :func:`current_modules`.
Nothing is ever stored on a module.

With no observer registered the cost of the hook point is one truthiness test of a list.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import TYPE_CHECKING, Callable, Iterator

if TYPE_CHECKING:
    from torch import nn

    from .call import AttentionCall
    from .output import AttentionOutput

Observer = Callable[["AttentionCall", "AttentionOutput"], None]

_OBSERVERS: list[Observer] = []
_SCOPE: contextvars.ContextVar[tuple] = contextvars.ContextVar("attnkit_module_scope", default=())
# set while observers run, so an observer that itself calls attnkit.attention is not re-notified
_NOTIFYING: contextvars.ContextVar[bool] = contextvars.ContextVar("attnkit_notifying", default=False)


class ObserverHandle:
    """Returned by :func:`add_observer`; ``remove()`` (or use as a context manager) unregisters."""

    def __init__(self, fn: Observer):
        self.fn = fn

    def remove(self) -> None:
        # remove by identity: two equal bound methods must not remove each other
        for i, f in enumerate(_OBSERVERS):
            if f is self.fn:
                del _OBSERVERS[i]
                return

    def __enter__(self) -> "ObserverHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def add_observer(fn: Observer) -> ObserverHandle:
    """Call ``fn(call, output)`` after every :func:`attnkit.attention` call until removed."""
    if not callable(fn):
        raise TypeError(f"observer must be callable as fn(call, output), got {type(fn).__name__}")
    _OBSERVERS.append(fn)
    return ObserverHandle(fn)


def has_observers() -> bool:
    return bool(_OBSERVERS) and not _NOTIFYING.get()


def notify(call: "AttentionCall", output: "AttentionOutput") -> None:
    """Run every observer on a finished call (called by :func:`attnkit.attention`)."""
    if not _OBSERVERS or _NOTIFYING.get():
        return
    token = _NOTIFYING.set(True)
    try:
        for fn in list(_OBSERVERS):
            fn(call, output)
    finally:
        _NOTIFYING.reset(token)


@contextlib.contextmanager
def scope(module: "nn.Module") -> Iterator[None]:
    """Mark ``module`` as the attention module whose calls run inside the ``with`` block."""
    token = _SCOPE.set(_SCOPE.get() + (module,))
    try:
        yield
    finally:
        _SCOPE.reset(token)


def push_scope(module: "nn.Module") -> contextvars.Token:
    """Non-context-manager form of :func:`scope` for forward pre-hooks; undo with :func:`pop_scope`."""
    return _SCOPE.set(_SCOPE.get() + (module,))


def pop_scope(token: contextvars.Token) -> None:
    _SCOPE.reset(token)


def current_modules() -> tuple:
    """The modules of the enclosing scopes, outermost first (empty outside any scope)."""
    return _SCOPE.get()
