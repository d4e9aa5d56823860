"""The blockwise backward uses the forward's mask, or raises PyTorch's in-place error.

The blockwise forward saves q, k, v and the row statistics, not the mask: the backward keeps the
forward's tile codes but evaluates the partly masked tiles again (O(n) memory instead of the
(L, S) mask). If the mask's data changed in between (``doc_ids[5] = 2``, a write through ``.data``,
a rebound closure variable), those tiles would be evaluated on another mask and the gradient would
match neither. PyTorch's rule for a tensor the backward needs is an error ("modified by an inplace
operation"), so attnkit does the same: the forward takes a snapshot of the mask
(:mod:`attnkit.core.cache_keys`, constants and tensor contents), and a hook on the outputs
compares the mask with it when their gradient arrives, before the blockwise node runs.

A mask the snapshot cannot see through (a predicate reading a user module or a file) is not
checked; built-in masks and predicates capturing tensors, numbers, lists, globals and bound
objects are.
"""

from __future__ import annotations

import torch

from ...core.cache_keys import freeze, same, snapshot
from ...core.output import BackendResult

__all__ = ["witness", "MODIFIED"]

MODIFIED = (
    "one of the variables needed for gradient computation has been modified by an inplace operation: the "
    "attention mask ({mask}) changed between the blockwise forward and its backward, which re-reads it; run "
    "the backward before editing the mask, or give the next step a new mask (or a clone of its tensors)"
)


def witness(call, res: BackendResult) -> BackendResult:
    """``res`` with a hook on its output and lse that raises :data:`MODIFIED` in the backward when
    ``call.mask`` no longer equals what the forward read. Nothing is added without a mask, without
    gradients, under ``torch.compile`` or inside ``torch.func`` transforms."""
    outs = [t for t in (res.out, res.lse) if isinstance(t, torch.Tensor) and t.requires_grad]
    if call.mask is None or not outs or torch.compiler.is_compiling() or torch._C._functorch.is_functorch_wrapped_tensor(res.out):
        return res
    snap = snapshot(call.mask, for_cache=False)  # a check, not a cache: taken with caching off too
    if snap is None:
        return res
    frozen, mask = freeze(snap), call.mask

    def check(grad: torch.Tensor) -> torch.Tensor:
        now = snapshot(mask, for_cache=False)
        if now is None or now.key[1:] != snap.key[1:] or not same(frozen, now):  # key[0]: inference mode, not the mask
            raise RuntimeError(MODIFIED.format(mask=type(mask).__name__))
        return grad

    for t in outs:
        t.register_hook(check)
    return res
