"""Shape checks for user functions: custom mask predicates, custom biases and score mods.

A user's function is called by broadcasting on index grids ``b`` (B', 1, 1, 1), ``h`` (1, H', 1, 1),
``q_idx`` (1, 1, l, 1) and ``kv_idx`` (1, 1, 1, s) (:mod:`attnkit.core.indices`), so a correct one
returns a 4-D tensor that broadcasts to (B', H', l, s) — or a 0-d constant. A function that returns
anything else (a 5-D bias, a (3,)-shaped predicate result) would otherwise be accepted by one backend
and crash or return a wrong-shaped output on another, so every function is evaluated once on a tiny
grid (at most 2 × 2 × 3 × 5, on the call's device: ``meta`` works too) before any backend runs, and
the verdict is cached on the object: a model calling attention thousands of times pays for it once.
The same first look tells which of ``b`` / ``h`` an undeclared mask predicate reads (a plain
FlexAttention ``mask_mod``): an index it does not read comes back as an axis of size 1.

Shape legend: B batch, H heads, L queries, S keys; l, s a tile's queries and keys.
"""

from __future__ import annotations

import torch

from .indices import index_grid

_CHECKED = "_attnkit_shape_checked"  # attribute set on a function's wrapper object once it passed


def check_custom_functions(mask, bias, B: int, H: int, L: int, S: int, device: torch.device) -> None:
    """Check every custom predicate in ``mask`` and custom bias / score mod in ``bias`` (once each)."""
    from .biases import CustomBias, ScoreMod
    from .mask_values import CustomMask

    if min(B, H, L, S) == 0:
        return  # nothing will be evaluated (B = 0 returns an empty result); check on a real call
    for m in _walk(mask):
        if isinstance(m, CustomMask) and not getattr(m, _CHECKED, False):
            _check(m, "mask predicate", "(b, h, q_idx, kv_idx) -> bool", m.fn, False, B, H, L, S, device)
            m.device = device  # its tile map is evaluated where its captured tensors live
            if not m.dims_declared:
                m.dims, m.dims_read = read_dims(m.fn, B, H, L, S, device), True
    for m in _walk(bias):
        if isinstance(m, (CustomBias, ScoreMod)) and not getattr(m, _CHECKED, False):
            kind = "score_mod" if isinstance(m, ScoreMod) else "custom bias"
            sig = "(score, b, h, q_idx, kv_idx) -> score" if isinstance(m, ScoreMod) else "(b, h, q_idx, kv_idx) -> bias"
            _check(m, kind, sig, m.fn, isinstance(m, ScoreMod), B, H, L, S, device)


def _walk(obj):
    """The object and every part of it (And/Or/Not masks, summed biases)."""
    if obj is None:
        return
    yield obj
    for p in getattr(obj, "parts", ()) or ():
        yield from _walk(p)
    inner = getattr(obj, "inner", None)
    if inner is not None:
        yield from _walk(inner)


def _check(obj, kind: str, sig: str, fn, takes_score: bool, B: int, H: int, L: int, S: int, device) -> None:
    nb = min(B, 2) if "b" in obj.dims else 1
    nh = min(H, 2) if "h" in obj.dims else 1
    l, s = min(L, 3), min(S, 5)  # distinct sizes, so a result missing an axis cannot pass by accident
    g = index_grid((0, l), (0, s), batch=nb, heads=nh, device=device)
    grid = (nb, nh, l, s)
    # no repr(fn) unless needed: Dynamo cannot repr a function defined in the compiled function
    name = getattr(obj, "name", None) or getattr(fn, "__name__", None) or repr(fn)
    args = (g.b, g.h, g.q, g.kv)
    if takes_score:
        args = (torch.zeros(grid, device=device),) + args
    arg = "mask" if kind == "mask predicate" else "bias"
    try:
        with torch.no_grad():
            out = fn(*args)
    except (RuntimeError, IndexError) as err:  # a size or index error from inside the user's function
        raise ValueError(
            f"{arg}: {kind} {name!r} {sig} failed when called on the index grid b {tuple(g.b.shape)}, h {tuple(g.h.shape)}, "
            f"q_idx {tuple(g.q.shape)}, kv_idx {tuple(g.kv.shape)} (a tile of shape {grid}): {type(err).__name__}: {err}; "
            f"it is called on tiles of any size, not on the full (L, S) = ({L}, {S}) grid: compute it from the broadcast "
            "indices (e.g. table[h, q_idx - kv_idx]) instead of tensors of a fixed (L, S) shape"
        ) from err
    if not isinstance(out, torch.Tensor):
        if isinstance(out, (bool, int, float)) and not (kind == "mask predicate" and not isinstance(out, bool)):
            object.__setattr__(obj, _CHECKED, True)  # a Python constant broadcasts to anything
            return
        raise TypeError(f"{arg}: {kind} {name!r} {sig} must return a tensor, got {type(out).__name__}")
    if out.device.type == "meta" and torch.device(device).type != "meta":
        # a meta tensor has no values: every backend would fail deep inside (copying out of it)
        raise ValueError(
            f"{arg}: {kind} {name!r} {sig} returned a tensor on the meta device for inputs on {torch.device(device)}; "
            "it has shapes but no values to attend with: build its tensors on the call's device (e.g. from the "
            "index arguments, or torch.ones(..., device=q_idx.device))"
        )
    want = "bool" if kind == "mask predicate" else "numeric (not bool)"
    if (out.dtype == torch.bool) != (kind == "mask predicate") or out.is_complex():
        raise TypeError(f"{arg}: {kind} {name!r} {sig} must return a {want} tensor, got {out.dtype}")
    if out.dim() not in (0, 4) or not all(n in (1, w) for n, w in zip(out.shape, grid)):
        raise ValueError(
            f"{arg}: {kind} {name!r} {sig} must return a 4-D tensor broadcastable to (B, H, l, s) — shape {grid} on the "
            f"index grid b {tuple(g.b.shape)}, h {tuple(g.h.shape)}, q_idx {tuple(g.q.shape)}, kv_idx {tuple(g.kv.shape)} "
            f"(or a 0-d constant), got shape {tuple(out.shape)}; compute it from the broadcast indices without reshaping"
        )
    object.__setattr__(obj, _CHECKED, True)


def read_dims(fn, B: int, H: int, L: int, S: int, device) -> frozenset[str]:
    """The indices an undeclared predicate reads, from its result's shape on broadcast indices:
    an index axis of size 2 that comes back as size 1 was not read (as FlexAttention's B=None / H=None).

    On CPU probed with b and h of size 2 even when the call has one batch row or head, so a mask
    reused on a larger batch stays right; a predicate that fails there (a tensor captured for B=1
    indexed by b), and any predicate on other devices, is probed at the call's own sizes, and an axis
    of size 1 there stays in (not observed)."""
    l, s = min(L, 3), min(S, 5)
    probes = [(min(B, 2), min(H, 2))]
    if torch.device(device).type == "cpu":  # an out-of-range index on an accelerator is a device assert, not an error
        probes.insert(0, (2, 2))
    for nb, nh in probes:
        g = index_grid((0, l), (0, s), batch=nb, heads=nh, device=device)
        try:
            with torch.no_grad():
                out = torch.as_tensor(fn(g.b, g.h, g.q, g.kv))
        except Exception:  # noqa: BLE001 - only the extra probe can fail: the call's own sizes passed _check
            continue
        shape = (1, 1) if out.dim() < 4 else tuple(out.shape[:2])
        return frozenset(d for d, n, got in (("b", nb, shape[0]), ("h", nh, shape[1])) if n == 1 or got != 1)
    return frozenset({"b", "h"})

