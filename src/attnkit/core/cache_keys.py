"""What a cache may key by: a snapshot of everything a mask or predicate reads, checked by content.

Every cache in attnkit (call signatures, sdpa plans and dense masks, blockwise routes and segment
masks, tile maps) answers a question about a mask that a fresh computation would answer by reading
the mask's state. A cache may only ever return what that fresh computation would, so its key must
see all of that state. Identity and version counters do not: a freed tensor's address is reused
with version 0, writes through ``.data`` or a shared NumPy array leave ``_version`` alone, inference
tensors have no version counter at all, and a predicate reads its closure cells, the globals its
code names and the attributes of a bound object, none of which its identity changes with.

So a key is a :class:`Snapshot` of the object, walked as a predicate would read it:

* constants (None, bool, int, float, str, dtypes, devices, small NumPy arrays) by value;
* tensors by shape, dtype, strides and device in the key, and by *content*: an entry keeps a copy
  (:func:`freeze`) and a lookup compares it with the live tensor (:func:`same`, one pass over the
  bytes; a bool (8, 64) padding mask costs ~2 µs), so a rebinding, a ``.data`` or NumPy write, or
  a tensor freed and replaced at the same address all miss unless the values are equal;
* functions by their code object, defaults, closure cells and every global their code (and the
  code nested in it) names, recursively: a helper function, a captured list or dict, a
  ``functools.partial``'s arguments, a bound method's object and its class's methods are walked;
* library modules, builtins, library classes and functions of library modules (``torch``,
  ``numpy``, ``math``, ...) by identity (attnkit does not expect ``torch`` to change under it); anything else a walk meets (a user module, a generator, an object without
  ``__dict__``, a reference cycle, more than :data:`MAX_NODES` objects or :data:`MAX_ELEMENTS`
  tensor elements) makes the object uncacheable: :func:`snapshot` returns None and the caller
  computes afresh. When in doubt, do not cache.

The key also holds whether inference mode is on: a result built there is an inference tensor,
which a later call under autograd must never receive ("cannot be saved for backward").

``ATTNKIT_NO_CACHE=1`` in the environment, or ``with caches_disabled():``, turns every cache off
(:func:`enabled` is False; callers compute afresh); the differential tests compare both ways.
"""

from __future__ import annotations

import builtins
import contextlib
import enum
import functools
import os
import sys
import types
from collections import OrderedDict
from typing import Iterator, NamedTuple

import torch

__all__ = ["Snapshot", "snapshot", "freeze", "same", "enabled", "caches_disabled", "cell_filled", "MAX_NODES", "MAX_ELEMENTS"]

MAX_NODES = 512  # objects one snapshot may walk; a larger structure is not cached
MAX_ELEMENTS = 1 << 21  # tensor elements one snapshot may copy and compare; beyond, not cached
_TRUSTED_ROOTS = frozenset({"torch", "math", "numpy", "operator", "functools", "builtins", "attnkit",
                            "itertools", "collections", "typing", "cmath", "numbers", "enum"})
_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.Size,
          torch.memory_format, torch.layout, range, type(Ellipsis))
_PLAIN_TYPES = frozenset(t for t in _PLAIN if t is not range)  # exact types, one set lookup
_EXACT_TYPES = _PLAIN_TYPES - {float, complex}  # equal exactly when == says so (not -0.0 and 0.0)
_LIBRARY_OBJECTS: set[type] = set()  # attnkit classes met so far, walked by their __dict__ alone
_STABLE_CALLABLES = (types.BuiltinFunctionType, types.WrapperDescriptorType, types.MethodDescriptorType,
                     types.MethodWrapperType, type(torch.ops.aten.add))
_SKIPPED_CLASS_ATTRS = frozenset({"__dict__", "__weakref__", "__module__", "__doc__", "__qualname__",
                                  "__annotations__", "__firstlineno__", "__static_attributes__", "__orig_bases__"})
_OFF = [os.environ.get("ATTNKIT_NO_CACHE", "").strip() not in ("", "0")]


def enabled() -> bool:
    """False while caching is off (``ATTNKIT_NO_CACHE=1`` or inside :func:`caches_disabled`)."""
    return not _OFF[0]


@contextlib.contextmanager
def caches_disabled() -> Iterator[None]:
    """Turn every attnkit cache off for the block (process-wide): each call computes afresh."""
    old, _OFF[0] = _OFF[0], True
    try:
        yield
    finally:
        _OFF[0] = old


class Snapshot(NamedTuple):
    """``key``: hashable, every constant of the walk (tensors as shape, dtype, strides, device);
    ``tensors``: the live tensors the walk met, in order, whose content an entry compares. (A named
    tuple: built on every cached call, it must be cheap.)"""

    key: tuple
    tensors: tuple


class _Uncacheable(Exception):
    """Raised inside the walk when something it meets cannot be keyed."""


def snapshot(obj, *, for_cache: bool = True) -> Snapshot | None:
    """The :class:`Snapshot` of ``obj`` (a mask, a predicate, any object a cache is asked about),
    or None when part of it cannot be keyed (module docstring) or, ``for_cache``, caching is off."""
    if (_OFF[0] and for_cache) or _compiling():
        return None
    walk = _Walk()
    try:
        key = walk.visit(obj)
    except (_Uncacheable, RecursionError):
        return None
    return Snapshot((_inference(), key), tuple(walk.tensors))


_compiling = torch.compiler.is_compiling  # bound once: snapshot() runs on every cached call
_inference = torch.is_inference_mode_enabled
_wrapped = torch._C._functorch.is_functorch_wrapped_tensor
_STRIDED = torch.strided
_BITWISE_BYTES = 4096  # from this size a tensor is compared as int64 words (bool compares ~8x slower)


def freeze(snap: Snapshot) -> tuple:
    """Copies of the snapshot's tensors as they are now, for an entry to compare later."""
    return tuple(t.detach().clone() for t in snap.tensors)


def same(frozen: tuple, snap: Snapshot) -> bool:
    """True when every live tensor of ``snap`` holds exactly the bytes of its frozen copy (the keys'
    equality already matched shapes, dtypes and devices)."""
    if len(frozen) != len(snap.tensors):
        return False
    for old, now in zip(frozen, snap.tensors):
        nbytes = old.numel() * old.element_size()
        if nbytes >= _BITWISE_BYTES and nbytes % 8 == 0 and old.is_contiguous() and now.is_contiguous():
            old, now = old.reshape(-1).view(torch.int64), now.detach().reshape(-1).view(torch.int64)
        if not torch.equal(old, now):  # floats: a NaN never equals itself, so such an entry never hits (safe)
            return False
    return True


class _Walk:
    """One snapshot's traversal: counts nodes and tensor elements, refuses cycles."""

    def __init__(self):
        self.tensors: list[torch.Tensor] = []
        self.nodes = 0
        self.elements = 0
        self.path: set[int] = set()

    def visit(self, obj) -> object:
        kind = type(obj)
        if kind in _PLAIN_TYPES:
            if kind is float:
                return (kind, obj.hex())  # -0.0 is not 0.0; a NaN equals a NaN
            return (kind, repr(obj)) if kind is complex else (kind, obj)
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise _Uncacheable
        if kind is torch.Tensor or kind is torch.nn.Parameter:
            return self._tensor(obj)
        if kind in _LIBRARY_OBJECTS:  # attnkit's own masks and the like: their attributes are their state (a
            # tensor attribute straight to _tensor: one per attribute, so no node count is needed for it)
            return (kind, *[(name, type(val), val) if type(val) in _EXACT_TYPES else
                            (name, self._tensor(val)) if type(val) is torch.Tensor else (name, self.visit(val))
                            for name, val in obj.__dict__.items()])
        if isinstance(obj, _PLAIN) or (kind is frozenset and all(type(x) in _PLAIN_TYPES for x in obj)):
            return (kind, obj)  # a mask's dims, frozenset({"b"}), is a constant
        if id(obj) in self.path:
            raise _Uncacheable  # a cycle (a function capturing itself, a list holding itself)
        self.path.add(id(obj))
        try:
            return self._visit(obj)
        finally:
            self.path.discard(id(obj))

    def _visit(self, obj) -> object:
        kind = type(obj)
        if kind is torch.Tensor or kind is torch.nn.Parameter:
            return self._tensor(obj)
        if kind in (tuple, list):
            return (kind, tuple(self.visit(x) for x in obj))
        if kind in (dict, OrderedDict):
            return (kind, tuple((self.visit(k), self.visit(v)) for k, v in obj.items()))
        if kind in (set, frozenset):
            items = [self.visit(x) for x in obj]
            return (kind, frozenset(items))
        if kind is types.FunctionType:
            return self._function(obj)
        if kind is types.MethodType:
            return ("method", self.visit(obj.__func__), self.visit(obj.__self__))
        if kind is functools.partial:
            return ("partial", self.visit(obj.func), self.visit(obj.args), self.visit(obj.keywords))
        if kind is types.ModuleType:
            return ("module", _trusted_module(obj))
        if isinstance(obj, _STABLE_CALLABLES):
            owner = getattr(obj, "__self__", None)
            if owner is None or isinstance(owner, (types.ModuleType, type)):
                return ("callable", obj)  # a builtin or library function: immutable
            return ("bound builtin", getattr(obj, "__name__", None), type(owner), self.visit(owner))
        if isinstance(obj, type):
            return self._class(obj)
        if isinstance(obj, enum.Enum):
            return ("enum", type(obj), obj.name)  # members are constants (walking one would meet its class's member map)
        if _is_numpy(obj):
            return self._numpy(obj)
        if isinstance(obj, torch.Tensor):
            raise _Uncacheable  # a tensor subclass (fake, functorch, DTensor): its values are not ours to read
        return self._object(obj)

    def _tensor(self, t: torch.Tensor) -> tuple:
        seen = self.tensors
        for i, other in enumerate(seen):  # the same tensor met again (a document mask's q_ids is its kv_ids): compared once
            if other is t:  # both held by this walk, so identity is exact
                return ("same tensor as", i, t.requires_grad)
        if t.is_meta or _wrapped(t) or t.layout != _STRIDED:
            raise _Uncacheable
        shape, stride, dtype = t.shape, t.stride(), t.dtype
        if seen:  # another view of the same memory (ids[0] and ids[0] made twice): compared once too
            ptr = (t.data_ptr(), shape, stride, dtype)
            for i, other in enumerate(seen):
                if (other.data_ptr(), other.shape, other.stride(), other.dtype) == ptr and other.device == t.device:
                    return ("same tensor as", i, t.requires_grad)
        self.elements += t.numel()
        if self.elements > MAX_ELEMENTS:
            raise _Uncacheable
        seen.append(t)
        return ("tensor", shape, dtype, stride, t.device, t.requires_grad)

    def _function(self, fn: types.FunctionType) -> tuple:
        module = fn.__module__ or ""
        if fn.__closure__ is None and _trusted_name(module) and not module.startswith("attnkit"):
            return ("library function", fn)  # torch.nn.functional.pad and the like: code and globals are the library's
        cells = tuple(self.visit(c.cell_contents) if cell_filled(c) else ("empty cell",) for c in fn.__closure__ or ())
        glob = fn.__globals__
        names = []
        for name in sorted(_global_names(fn.__code__)):
            if name in glob:
                names.append((name, self.visit(glob[name])))
            elif hasattr(builtins, name):
                names.append((name, self.visit(getattr(builtins, name))))
        return ("function", fn.__code__, cells, self.visit(fn.__defaults__), self.visit(fn.__kwdefaults__), tuple(names))

    def _class(self, cls: type) -> tuple:
        if _trusted_name(cls.__module__):
            return ("class", cls)
        attrs = []
        for klass in cls.__mro__:  # a user class: its methods and class attributes are read too
            if klass is object or _trusted_name(klass.__module__):
                continue
            for name, val in vars(klass).items():
                if name in _SKIPPED_CLASS_ATTRS:
                    continue
                if isinstance(val, (staticmethod, classmethod)):
                    val = val.__func__
                elif isinstance(val, property):
                    val = (val.fget, val.fset)
                attrs.append((name, self.visit(val)))
        return ("class", cls, tuple(attrs))

    def _numpy(self, a) -> tuple:
        import numpy as np

        if isinstance(a, np.generic):
            return ("numpy scalar", a.dtype.str, a.tobytes())
        if not isinstance(a, np.ndarray) or a.dtype.hasobject or a.size > 4096:
            raise _Uncacheable
        return ("ndarray", a.shape, a.dtype.str, a.tobytes())

    def _object(self, obj) -> tuple:
        state = getattr(obj, "__dict__", None)
        if state is None or getattr(type(obj), "__slots__", None) or isinstance(obj, (types.GeneratorType, types.CodeType)):
            raise _Uncacheable
        if type(obj).__module__.startswith("attnkit."):
            _LIBRARY_OBJECTS.add(type(obj))  # from now on straight from visit(), in this same form
            return self.visit(obj)
        cls = self._class(type(obj))
        return ("object", cls, tuple((name, self.visit(val)) for name, val in state.items()))


def _global_names(code: types.CodeType) -> set[str]:
    """Names the code (and every function or comprehension nested in it) may read as globals."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def cell_filled(cell) -> bool:
    """True when a closure cell holds a value (a cell not yet assigned raises on reading)."""
    try:
        cell.cell_contents
    except ValueError:  # a cell not yet assigned
        return False
    return True


def _trusted_name(module: str | None) -> bool:
    return (module or "").split(".")[0] in _TRUSTED_ROOTS


def _trusted_module(mod: types.ModuleType) -> str:
    """A library module's name (its functions do not change under attnkit); a user module may hold
    anything (``config.window = 3``), so it makes the snapshot uncacheable."""
    if not _trusted_name(mod.__name__):
        raise _Uncacheable
    return mod.__name__


def _is_numpy(obj) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(obj, (np.ndarray, np.generic))
