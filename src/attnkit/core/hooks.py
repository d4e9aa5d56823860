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

Observers are context-local: :func:`add_observer` registers ``fn`` in a process-wide list *and*
marks it active in the current :mod:`contextvars` context, and a call notifies only the observers
active in its own context. So a capture opened in one thread (or asyncio task) records that
thread's calls only, never another thread's running at the same time; a thread started inside the
``with`` block starts with an empty context and is not recorded either.

With no observer registered the cost of the hook point is one truthiness test of a list (and
``torch.compile`` traces straight through it; with one active, the context lookup breaks the graph,
so the call runs eagerly and is recorded; ``fullgraph=True`` then refuses, as it must).
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
from typing import TYPE_CHECKING, Callable, Iterator

if TYPE_CHECKING:
    from torch import nn

    from .call import AttentionCall
    from .output import AttentionOutput

Observer = Callable[["AttentionCall", "AttentionOutput"], None]

_OBSERVERS: list["ObserverHandle"] = []  # every registered observer, of every context
_IDS = itertools.count()
# the ids of the observers active in this context (a thread starts with none)
_ACTIVE: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar("attnkit_observers", default=frozenset())
_SCOPE: contextvars.ContextVar[tuple] = contextvars.ContextVar("attnkit_module_scope", default=())
# set while observers run, so an observer that itself calls attnkit.attention is not re-notified
_NOTIFYING: contextvars.ContextVar[bool] = contextvars.ContextVar("attnkit_notifying", default=False)


class ObserverHandle:
    """Returned by :func:`add_observer`; ``remove()`` (or use as a context manager) unregisters."""

    def __init__(self, fn: Observer):
        self.fn = fn
        self.id = next(_IDS)

    def remove(self) -> None:
        # by handle identity (handles define no __eq__): two equal bound methods must not remove each
        # other, and one list.remove is atomic while other threads add or remove their own
        try:
            _OBSERVERS.remove(self)
        except ValueError:
            pass  # removed already
        active = _ACTIVE.get()
        if self.id in active:
            _ACTIVE.set(active - {self.id})

    def __enter__(self) -> "ObserverHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def add_observer(fn: Observer) -> ObserverHandle:
    """Call ``fn(call, output)`` after every :func:`attnkit.attention` call made in this context
    (this thread / task, and code it calls) until removed."""
    if not callable(fn):
        raise TypeError(f"observer must be callable as fn(call, output), got {type(fn).__name__}")
    handle = ObserverHandle(fn)
    _OBSERVERS.append(handle)
    _ACTIVE.set(_ACTIVE.get() | {handle.id})
    return handle


def _active() -> list[ObserverHandle]:
    ids = _ACTIVE.get()
    return [h for h in list(_OBSERVERS) if h.id in ids] if ids else []


def is_active(handle: ObserverHandle) -> bool:
    """Is ``handle``'s observer active in the current context (thread / task)?"""
    return handle.id in _ACTIVE.get()


def has_observers() -> bool:
    """True when an observer is active in this context (the list test first: it is free)."""
    return bool(_OBSERVERS) and bool(_ACTIVE.get()) and not _NOTIFYING.get()


def notify(call: "AttentionCall", output: "AttentionOutput") -> None:
    """Run this context's observers on a finished call (called by :func:`attnkit.attention`)."""
    if not _OBSERVERS or _NOTIFYING.get():
        return
    token = _NOTIFYING.set(True)
    try:
        for h in _active():
            h.fn(call, output)
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
