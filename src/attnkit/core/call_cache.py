"""The fast path for repeated calls: validation and the backend choice, kept per call signature.

A model calls attention with the same shapes, mask and options in every layer and every step.
For a small call (n = 64) validating the inputs (:func:`attnkit.core.call.make_call`, ~10 µs) and
asking every backend whether it supports the call and what it would cost
(:func:`attnkit.core.dispatch.choose`, ~20 µs) cost a quarter of SDPA's kernel, and both give the
same answer for the same signature. So :func:`attnkit.core.call.attention` keeps that answer here.

The signature (:func:`signature`) is everything validation and the choice read:

* q, k, v: type, shape, strides, dtype, device and ``requires_grad``;
* the mask's state (:func:`mask_state`): its kind and every attribute, a tensor by shape, dtype,
  strides and device in the key and by *content* (the entry keeps a copy; a hit compares it with
  the live tensor, :mod:`.cache_keys`), so an equal mask rebuilt every call (``masks.causal()``,
  a fresh padding mask of the same lengths) hits, and an edited one misses however it was edited
  (in place, through ``.data`` or NumPy, or a freed tensor replaced at the same address);
* the scale, the backend name, grad mode, inference mode, the :mod:`.options` in effect, the
  device whose cost rates are read and the registry's generation (registering a backend starts over).

Only plain calls take it: no score, bias, sinks or dropout, no weights returned and no per-call
memory budget; a mask that is None, a bool tensor, or built of attnkit's own mask kinds (a
custom predicate may read anything, so it is validated and dispatched every call). Never under
``torch.compile``, inside ``torch.func`` transforms, on ``meta`` tensors or while caching is off
(``ATTNKIT_NO_CACHE=1``, :func:`attnkit.core.cache_keys.caches_disabled`). A mask holding more
than :data:`MAX_HELD_ELEMENTS` tensor elements is not cached; at most :data:`MAX_ENTRIES` entries
holding at most :data:`MAX_HELD_BYTES` of mask copies in all are kept, the oldest dropped first
(a hit is one dict read and the content comparison, without a lock or a reordering).

The values of q, k and v are not part of the signature: what depends on them (the NaN/inf checks)
runs every call, in the backend. Backends may keep their own per-signature plans: ``AttentionCall.signature`` is the
entry's serial number, an int never given to another entry (None when the call took the slow path).
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass

import torch

from . import cost, registry
from .cache_keys import Snapshot, enabled, freeze, same, snapshot
from . import options as _options
from .masks import Mask

__all__ = ["Entry", "mask_state", "signature", "lookup", "frozen", "next_serial", "store", "clear", "info", "MAX_ENTRIES"]

MAX_ENTRIES = 64
MAX_HELD_ELEMENTS = 1 << 21  # a mask holding a larger tensor is not cached (its copy and comparison cost as much as the work)
MAX_HELD_BYTES = 32 << 20  # mask copies the entries keep, in all
_HELD = 0  # bytes of mask copies the entries hold now
_CACHE: dict[tuple, "Entry"] = {}  # insertion order: the oldest first
_LOCK = threading.Lock()
_STATS = {"hits": 0, "misses": 0}
_SERIAL = itertools.count(1)


@dataclass(frozen=True)
class Entry:
    """What a signature's first call worked out: the validated mask object (for a tensor mask, the
    wrapper built then; a hit wraps the live tensor again), score and scale, the chosen backend and
    its report (copied per call), and copies of the mask's tensors as they were (``held``), which a
    hit must match."""

    mask: Mask | None
    score: object
    scale: float
    backend: registry.Backend
    report: object
    held: tuple
    serial: int  # this entry's number, never reused: AttentionCall.signature, backends' plan key


def mask_state(m) -> Snapshot | None:
    """The snapshot of mask ``m`` (:func:`attnkit.core.cache_keys.snapshot`), or None when it may
    not be cached: a custom predicate (validated every call), a mask class defined outside attnkit,
    a non-bool or large tensor, or anything the snapshot cannot see through."""
    if isinstance(m, torch.Tensor):
        if m.dtype != torch.bool or m.numel() > MAX_HELD_ELEMENTS:
            return None
    elif not _builtin_mask(m):
        return None
    return snapshot(m)  # None past cache_keys.MAX_ELEMENTS (== MAX_HELD_ELEMENTS) tensor elements


def _builtin_mask(m) -> bool:
    """True for a mask made only of attnkit's own kinds, without a custom predicate anywhere."""
    cls = type(m)
    ok = _KINDS.get(cls)
    if ok is None:
        ok = _KINDS[cls] = cls.__module__.startswith("attnkit.core.") and cls.__name__ != "CustomMask"
    if not ok:
        return False
    state = m.__dict__
    parts, inner = state.get("parts"), state.get("inner")
    return (parts is None or all(_builtin_mask(p) for p in parts)) and (inner is None or _builtin_mask(inner))


_KINDS: dict[type, bool] = {}  # mask class -> one of attnkit's own kinds (not a custom predicate)


def signature(q, k, v, mask, scale, backend) -> tuple[tuple, Snapshot] | None:
    """(key, the mask's snapshot) for a plain call, or None when the call must take the slow path
    (module docstring). The caller has already checked that score, bias, sinks, dropout, weights
    and the memory budget are at their defaults."""
    if type(q) is not torch.Tensor or type(k) is not torch.Tensor or type(v) is not torch.Tensor:
        return None
    if not isinstance(backend, str) or not (scale is None or type(scale) in (float, int)):
        return None
    if not enabled() or q.is_meta or _compiling() or _wrapped(q):
        return None
    snap = _NO_MASK if mask is None else mask_state(mask)
    if snap is None:
        return None
    key = (
        backend, snap.key, scale, q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(),
        q.dtype, k.dtype, v.dtype, q.device, k.device, v.device,
        q.requires_grad, k.requires_grad, v.requires_grad, _grad_enabled(), _inference(),
        _options_here(), _cost_device(), registry.generation(),
    )
    return key, snap


_NO_MASK = Snapshot((), ())
# read once per call on the hit path: bound here, not looked up through their modules every time
_compiling = torch.compiler.is_compiling
_wrapped = torch._C._functorch.is_functorch_wrapped_tensor
_grad_enabled = torch.is_grad_enabled
_inference = torch.is_inference_mode_enabled
_options_here = _options._current  # not tracing here (checked above), where _current() is current()
_cost_device = cost.current_device


def lookup(key: tuple, snap: Snapshot) -> Entry | None:
    """The entry of ``key`` when the mask's tensors still hold the content it was built for."""
    hit = _CACHE.get(key)  # one dict read, atomic: no lock on the hit path
    if hit is None or (hit.held and not same(hit.held, snap)):
        return None
    _STATS["hits"] += 1  # approximate under threads; only info() reads it
    return hit


def frozen(snap: Snapshot) -> tuple:
    """The copies an :class:`Entry` keeps of the mask's tensors (:func:`attnkit.core.cache_keys.freeze`)."""
    return freeze(snap) if snap.tensors else ()


def next_serial() -> int:
    """A fresh serial number for a new :class:`Entry`."""
    return next(_SERIAL)


def _held_bytes(entry: Entry) -> int:
    return sum(t.numel() * t.element_size() for t in entry.held)


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
