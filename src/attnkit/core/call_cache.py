"""The fast path for repeated calls: validation and the backend choice, kept per call signature.

A model calls attention with the same shapes, mask and options in every layer and every step.
For a small call (n = 64) validating the inputs (:func:`attnkit.core.call.make_call`, ~10 µs) and
asking every backend whether it supports the call and what it would cost
(:func:`attnkit.core.dispatch.choose`, ~20 µs) cost a quarter of SDPA's kernel, and both give the
same answer for the same signature. So :func:`attnkit.core.call.attention` keeps that answer here.

The signature (:func:`signature`) is everything validation and the choice read:

* q, k, v: type, shape, strides, dtype, device and ``requires_grad``;
* the mask's state: its kind and every attribute, a tensor by identity, ``_version``, shape,
  dtype and device (an in-place edit bumps ``_version``; a new tensor is another identity), so
  an equal mask rebuilt every call (``masks.causal()``) hits and an edited one misses;
* the scale, the backend name, grad mode, the :mod:`.options` in effect, the device whose cost
  rates are read and the registry's generation (registering a backend starts over).

Only plain calls take it: no score, bias, sinks or dropout, no weights returned and no per-call
memory budget; a mask that is None, a bool tensor, or built of attnkit's own mask kinds (a
custom predicate may read anything, so it is validated and dispatched every call). Never under
``torch.compile``, inside ``torch.func`` transforms or on ``meta`` tensors. An entry holds the
tensors its key names by identity, so their ids cannot be reused while it lives (a mask holding a
tensor over :data:`MAX_HELD_ELEMENTS` elements is not cached, so no large dense mask outlives its
user's last reference by more than the call); at most :data:`MAX_ENTRIES` entries holding at most
:data:`MAX_HELD_BYTES` of mask tensors in all are kept, the oldest dropped first (a hit is one dict read, without a
lock or a reordering).

Values are not part of the signature: what depends on them (the NaN/inf checks) runs every call,
in the backend. Backends may keep their own per-signature plans: ``AttentionCall.signature`` is the
entry's serial number, an int never given to another entry (None when the call took the slow path).
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass

import torch

from . import cost, registry
from . import options as _options
from .masks import Mask

__all__ = ["Entry", "mask_state", "signature", "lookup", "next_serial", "store", "clear", "info", "MAX_ENTRIES"]

MAX_ENTRIES = 64
MAX_HELD_ELEMENTS = 1 << 21  # a mask holding a larger tensor is not cached (the cache would keep it alive)
MAX_HELD_BYTES = 32 << 20  # mask tensors the entries keep alive, in all
_HELD = 0  # bytes of mask tensors the entries hold now
_CACHE: dict[tuple, "Entry"] = {}  # insertion order: the oldest first
_LOCK = threading.Lock()
_STATS = {"hits": 0, "misses": 0}
_SERIAL = itertools.count(1)
_PLAIN = (int, float, str, bool, type(None), frozenset)  # mask attributes that are constants


@dataclass(frozen=True)
class Entry:
    """What a signature's first call worked out: the validated mask object (for a tensor mask, the
    wrapper built then), score and scale, the chosen backend and its report (copied per call), and
    the tensors the key names (held so their ids stay theirs)."""

    mask: Mask | None
    score: object
    scale: float
    backend: registry.Backend
    report: object
    held: tuple
    serial: int  # this entry's number, never reused: AttentionCall.signature, backends' plan key


def mask_state(m) -> tuple[tuple, list] | None:
    """(a hashable description of mask ``m``, the tensors it names), or None when the mask may read
    something a description cannot see (a custom predicate, a mask class defined outside attnkit).
    Equal descriptions mean equal masks as long as the named tensors are alive: held by the caller."""
    held: list = []
    state = _mask_state(m, held)
    return None if state is None else (state, held)


def _mask_state(m, held: list) -> tuple | None:
    """A hashable description of mask ``m`` (kind, constants, tensors by identity and version),
    appending its tensors to ``held``; None when the mask may read something the key cannot see."""
    if isinstance(m, torch.Tensor):
        if m.dtype != torch.bool or m.numel() > MAX_HELD_ELEMENTS:
            return None
        held.append(m)
        return ("tensor", id(m), m._version, m.shape, m.stride(), m.device)
    cls = type(m)
    if not cls.__module__.startswith("attnkit.core.") or cls.__name__ == "CustomMask":
        return None
    state: list = [cls]
    for name, val in vars(m).items():
        if isinstance(val, _PLAIN):
            state.append((name, val))
        elif isinstance(val, torch.Tensor):
            if val.numel() > MAX_HELD_ELEMENTS:
                return None  # not kept alive by the cache: a large dense mask is validated every call
            held.append(val)
            state.append((name, id(val), val._version, val.shape, val.dtype, val.device))
        elif isinstance(val, Mask):
            inner = _mask_state(val, held)
            if inner is None:
                return None
            state.append((name, inner))
        elif isinstance(val, (list, tuple)) and all(isinstance(p, Mask) for p in val):
            parts = [_mask_state(p, held) for p in val]
            if any(p is None for p in parts):
                return None
            state.append((name, tuple(parts)))
        else:
            return None  # a callable or another object: its behaviour is not in the key
    return tuple(state)


def signature(q, k, v, mask, scale, backend) -> tuple[tuple, list] | None:
    """(key, tensors the key names) for a plain call, or None when the call must take the slow path
    (module docstring). The caller has already checked that score, bias, sinks, dropout, weights
    and the memory budget are at their defaults."""
    if type(q) is not torch.Tensor or type(k) is not torch.Tensor or type(v) is not torch.Tensor:
        return None
    if not isinstance(backend, str) or not (scale is None or type(scale) in (float, int)):
        return None
    if q.is_meta or _compiling() or _wrapped(q):
        return None
    held: list = []
    ms = None if mask is None else _mask_state(mask, held)
    if mask is not None and ms is None:
        return None
    key = (
        backend, ms, scale, q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(),
        q.dtype, k.dtype, v.dtype, q.device, k.device, v.device,
        q.requires_grad, k.requires_grad, v.requires_grad, _grad_enabled(),
        _options_here(), _cost_device(), registry.generation(),
    )
    return key, held


# read once per call on the hit path: bound here, not looked up through their modules every time
_compiling = torch.compiler.is_compiling
_wrapped = torch._C._functorch.is_functorch_wrapped_tensor
_grad_enabled = torch.is_grad_enabled
_options_here = _options._current  # not tracing here (checked above), where _current() is current()
_cost_device = cost.current_device


def lookup(key: tuple) -> Entry | None:
    hit = _CACHE.get(key)  # one dict read, atomic: no lock on the hit path
    if hit is not None:
        _STATS["hits"] += 1  # approximate under threads; only info() reads it
    return hit


def next_serial() -> int:
    """A fresh serial number for a new :class:`Entry`."""
    return next(_SERIAL)


def _held_bytes(entry: Entry) -> int:
    return sum(t.numel() * t.element_size() for t in entry.held if isinstance(t, torch.Tensor))


def store(key: tuple, entry: Entry) -> None:
    """Keep ``entry``; the oldest entries go first while more than :data:`MAX_ENTRIES` are kept or
    their mask tensors hold more than :data:`MAX_HELD_BYTES` in all (a caller making a fresh mask
    every call never has more than that kept alive by the cache)."""
    global _HELD
    with _LOCK:
        _STATS["misses"] += 1
        old = _CACHE.pop(key, None)
        _HELD += _held_bytes(entry) - (0 if old is None else _held_bytes(old))
        _CACHE[key] = entry
        while len(_CACHE) > 1 and (len(_CACHE) > MAX_ENTRIES or _HELD > MAX_HELD_BYTES):
            _HELD -= _held_bytes(_CACHE.pop(next(iter(_CACHE))))  # the oldest first


def clear() -> None:
    """Drop every entry (tests; after changing a backend's behaviour without re-registering it)."""
    global _HELD
    with _LOCK:
        _CACHE.clear()
        _HELD = 0
        _STATS.update(hits=0, misses=0)


def info() -> dict[str, int]:
    """{"hits", "misses", "size"} since the last :func:`clear`."""
    with _LOCK:
        return {**_STATS, "size": len(_CACHE)}
