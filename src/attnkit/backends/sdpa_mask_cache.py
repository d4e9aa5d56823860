"""The sdpa backend's prepared dense masks, cached per (mask, shape, device, dtype) for small calls.

A masked call on the sdpa backend builds, every call, the dense bool mask (B|1, H|1, L, S), the
keys no query may see, the rows that see no key, the kernel's mask with those rows unmasked, and
its additive float form. For a call of n <= 512 that preparation cost more than the kernel itself
(padding mask, n = 64: about 0.5 ms of a 1 ms call, ``benchmarks/bias_and_small.py``). A model
calls attention with the same mask object and shapes layer after layer, so the prepared tensors
are kept here and reused.

What makes a reuse safe: the entry is keyed by the mask's snapshot
(:func:`attnkit.core.call_cache.mask_state`, :mod:`attnkit.core.cache_keys`): its kind, its
constants (a window's width) and its tensors' shapes, dtypes and devices, with the tensors' content
compared against the copies the entry keeps, so an edit of any kind (in place, through ``.data`` or
NumPy, a rebinding to a new tensor) misses; plus the shapes (B, H, Hkv, L, S), the device and
inference mode (what is built under ``torch.inference_mode()`` is never handed to a call under
autograd). Masks whose values can depend on state the snapshot cannot see are never cached: custom
predicates (:class:`~attnkit.core.mask_values.CustomMask`, whose function may capture anything) and
mask classes defined outside attnkit. Not used while ``torch.compile`` traces, under ``torch.func``,
on ``meta`` tensors, while caching is off, or for masks over :data:`MAX_ELEMENTS` elements; at most
:data:`MAX_ENTRIES` entries are kept (least recently used dropped first), so the cache holds at most
``MAX_ENTRIES · MAX_ELEMENTS · 6`` bytes (bool and float32 forms) besides the masks' copies.

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import torch

from ..core.cache_keys import freeze, same
from ..core.call_cache import mask_state

__all__ = ["Prepared", "prepared", "dead_keys_inert", "squares_inert", "sum_of_squares", "plain_strides", "clear", "MAX_ENTRIES", "MAX_ELEMENTS"]

MAX_ENTRIES = 8
MAX_ELEMENTS = 1 << 21  # elements of the dense mask (B|1 · H|1 · L · S): n = 512 with B = 8
_DATA_ATTRS = ("t", "valid", "kv_ids", "q_ids", "prefix")  # the tensors built-in masks hold
_CACHE: OrderedDict[tuple, "Prepared"] = OrderedDict()
_LOCK = threading.Lock()


@dataclass
class Prepared:
    """One mask prepared for the kernel: ``allowed`` (B|1, H|1, L, S) bool, ``dead`` (B|1, Hkv|1, S, 1)
    keys no query sees and ``any_dead`` whether there is one (True where values cannot be read), ``empty_rows`` (B|1, H|1, L) rows that see no key
    (None when there are none), ``kernel_mask`` = allowed with empty rows unmasked (bool), and its
    additive float forms per dtype (0 / -inf), built on first use."""

    held: tuple  # copies of the mask's tensors as they were when this was built (a hit must match them)
    allowed: torch.Tensor
    dead: torch.Tensor
    any_dead: bool
    empty_rows: torch.Tensor | None
    kernel_mask: torch.Tensor
    additive: dict = field(default_factory=dict)

    def additive_mask(self, dtype: torch.dtype) -> torch.Tensor:
        """The kernel mask as 0 / -inf in ``dtype`` (B|1, H|1, L, S), built once per dtype."""
        if dtype not in self.additive:
            self.additive[dtype] = torch.zeros((), dtype=dtype, device=self.allowed.device).masked_fill(
                ~self.kernel_mask, float("-inf"))
        return self.additive[dtype]


def _mask_tensors(mask) -> list[torch.Tensor] | None:
    """Every tensor a built-in mask (and its parts) holds, or None when it may read others."""
    from ..core.mask_values import CustomMask

    out, stack = [], [mask]
    while stack:
        m = stack.pop()
        if isinstance(m, CustomMask) or not type(m).__module__.startswith("attnkit.core."):
            return None
        stack += list(getattr(m, "parts", ()) or ()) + [i for i in (getattr(m, "inner", None),) if i is not None]
        out += [t for t in (getattr(m, a, None) for a in _DATA_ATTRS) if isinstance(t, torch.Tensor)]
    return out


def _dead_keys(allowed: torch.Tensor, Hkv: int) -> torch.Tensor:
    """(B|1, Hkv|1, S, 1) True for keys no query of any head sharing that kv head may see."""
    Bm, Hm, L, S = allowed.shape
    if Hm > 1:
        seen = allowed.reshape(Bm, Hkv, Hm // Hkv, L, S).any(2).any(-2)  # (B|1, Hkv, S)
    else:
        seen = allowed.any(-2)  # (B|1, 1, S)
    return (~seen).unsqueeze(-1)


def _build(mask, B: int, H: int, Hkv: int, L: int, S: int, device) -> Prepared:
    allowed = mask.materialize(L, S, batch=B, heads=H, device=device)
    dead = _dead_keys(allowed, Hkv)
    empty = ~allowed.any(-1)  # (B|1, H|1, L)
    if torch.compiler.is_compiling() or allowed.device.type == "meta":  # no values to read: keep both
        return Prepared((), allowed, dead, True, empty, allowed | empty.unsqueeze(-1))
    has_dead, has_empty = bool(dead.any()), bool(empty.any())
    kernel_mask = allowed | empty.unsqueeze(-1) if has_empty else allowed
    return Prepared((), allowed, dead, has_dead, empty if has_empty else None, kernel_mask)


def _cacheable(mask, q: torch.Tensor) -> list[torch.Tensor] | None:
    """The mask's tensors (for the cache key), or None when the call may not be cached; ``mask``
    None asks only whether q's values can be read here."""
    if torch.compiler.is_compiling() or q.device.type == "meta" or torch._C._functorch.is_functorch_wrapped_tensor(q):
        return None
    return [] if mask is None else _mask_tensors(mask)


def prepared(mask, B: int, H: int, Hkv: int, L: int, S: int, q: torch.Tensor) -> Prepared:
    """The prepared mask for a call with q (B, H, L, E) against S keys: from the cache when an equal
    mask (same snapshot key, same tensor contents) was prepared for the same shapes and device; else
    built (and cached when allowed, see the module docstring)."""
    tensors = _cacheable(mask, q)
    snap = None if tensors is None else mask_state(mask)
    if snap is None:
        return _build(mask, B, H, Hkv, L, S, q.device)
    key = (B, H, Hkv, L, S, q.device, snap.key)
    with _LOCK:
        hit = _CACHE.get(key)
    if hit is not None and same(hit.held, snap):
        with _LOCK:
            if key in _CACHE:
                _CACHE.move_to_end(key)
        return hit
    entry = _build(mask, B, H, Hkv, L, S, q.device)
    if entry.allowed.numel() <= MAX_ELEMENTS and not _aliases(entry, snap.tensors):
        entry.held = freeze(snap)
        with _LOCK:
            _CACHE[key] = entry
            while len(_CACHE) > MAX_ENTRIES:
                _CACHE.popitem(last=False)
    return entry


def _aliases(entry: Prepared, tensors: tuple) -> bool:
    """True when a prepared tensor shares memory with the mask's own (a view of a dense mask): a
    later edit of the mask would change the entry under its frozen copy, so it is not cached."""
    ptrs = {t.untyped_storage().data_ptr() for t in tensors}
    mine = (entry.allowed, entry.kernel_mask, entry.dead, entry.empty_rows)
    return any(t is not None and t.untyped_storage().data_ptr() in ptrs for t in mine)


def dead_keys_inert(call, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """True when keys no query may see cannot change the result even if left in place, so the
    (B, Hkv, S, E) copies that zero them can be skipped: the plain dot score, float32 / float64
    inputs whose sums of squares are finite (so every element is), and
    ``|scale| · sqrt(Σq² · Σk²)`` (Cauchy-Schwarz: a bound on every |q_i · k_j| · |scale|) far below
    overflow, so each dead score is finite and the kernel's -inf mask makes its weight exactly 0
    (0 times a finite value is 0, in the output and in every gradient). Three BLAS dot products,
    about 20x cheaper than the two broadcast ``masked_fill`` copies they replace (B=8, n=64)."""
    if not getattr(call.score, "identity_dot", False) or q.dtype not in (torch.float32, torch.float64):
        return False
    if _cacheable(None, q) is None:
        return False  # values unreadable (meta, torch.compile, torch.func): zero the dead keys as always
    return squares_inert(call.scale, [float(sum_of_squares(t)) for t in (q, k, v)])


def squares_inert(scale: float, sq: list[float]) -> bool:
    """:func:`dead_keys_inert`'s test on [Σq², Σk², Σv²] already read (a dot-score call of float32 /
    float64 inputs): all finite and ``|scale| · sqrt(Σq² · Σk²)`` below 1e30."""
    bound = abs(scale) * (sq[0] * sq[1]) ** 0.5 if sq[0] < 1e300 and sq[1] < 1e300 else float("inf")
    return all(x == x and x < float("inf") for x in sq) and bound < 1e30


def sum_of_squares(t: torch.Tensor) -> torch.Tensor:
    """Σ t² as a 0-d tensor: one BLAS dot product for a contiguous tensor, else through a temporary."""
    t = t.detach()
    return torch.dot(t.view(-1), t.view(-1)) if t.is_contiguous() else t.pow(2).sum()


def plain_strides(t: torch.Tensor) -> bool:
    """True when ``t`` has exactly the row-major strides of a fresh tensor of its shape. Stricter than
    ``is_contiguous()``, which ignores the strides of size-1 dims: CPU's fused op reads those too
    (k, v of shape (1, 1, 1, E) with an expanded or channels-last layout gave wrong outputs)."""
    expected, acc = [], 1
    for n in reversed(t.shape):
        expected.append(acc)
        acc *= n
    return t.stride() == tuple(reversed(expected))


def clear() -> None:
    """Drop every cached mask (tests; or to release the memory at once)."""
    with _LOCK:
        _CACHE.clear()
