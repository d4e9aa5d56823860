r"""Prefix-LM masks on the fused kernel (the *prefix-LM* route): the prefix rows in one unmasked call,
the rest as a causal call.

A prefix-LM mask (:func:`attnkit.masks.prefix_lm` with an int prefix ``P``) lets the query at key
position ``p = i + off`` (``off`` from the causal part's alignment) see the keys
``{j < P} ∪ {j <= p}``. That set is one of two simple shapes:

* ``p < P`` (rows ``i < r0 = clip(P - off, 0, L)``): the keys ``[0, P)``, every one of them: an
  unmasked call on those rows and keys;
* ``p >= P`` (rows ``i >= r0``): the keys ``[0, p]``, since the prefix lies inside it: a causal call
  with the first of those rows at key position ``off + r0`` (:func:`..kernel.causal.dense_forward`:
  one ``is_causal`` call, or an unmasked prefix beside an ``is_causal`` square merged by
  log-sum-exp, with its row shift at large logits).

No row needs both parts, so nothing is merged between them, and each part runs on the kernel's
tallest tiles (one thread, n = 16k, float32: the per-block tile route, 256-query blocks, ran at
5.4 ns per allowed pair where the kernel's causal call runs near 3.5). Rows that see no key (an
empty prefix and ``p < 0``, only when L > S) get out 0 and lse -inf.

The backward is :func:`..kernel.causal_grad.add_causal_grads` on each part (weights rebuilt from the
backward's own scores and renormalised per row), both adding into one set of float32 gradients
(float64 for float64), cast to the inputs' dtypes once.

A prefix given per batch row (a tensor) takes the *tiles* route (:mod:`.tiles`).

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E head dim (Ev = E).
"""

from __future__ import annotations

import torch

from ....core import cost
from ....core.indices import alignment_offset
from ....core.mask_algebra import OrMask
from ....core.mask_kinds import CausalMask, KeyPrefixMask
from ..kernel.causal import dense_forward, join_rows
from ..kernel.causal_grad import add_causal_grads, summed_grads
from ..kernel.eligible import mask_kernel_eligible
from ..kernel.gate import forward_op
from .base import KernelRoute
from .causal import causal_work

__all__ = ["PrefixLMRoute", "PREFIX_LM", "prefix_lm_of", "split_rows", "prefix_lm_forward", "prefix_lm_grads"]


class PrefixLMRoute(KernelRoute):
    """Plan: (off, P), the causal part's key position of query 0 and the prefix length. Not for
    ``scale <= 0``, as the causal route (the kernel's ``is_causal`` path returns NaN there)."""

    name = "fused kernel, prefix-LM (prefix rows unmasked, the others causal)"

    def applies(self, call) -> bool:
        return call.scale > 0 and prefix_lm_of(call.mask, call.L, call.S) is not None and mask_kernel_eligible(call)

    def plan(self, call) -> tuple[int, int] | None:
        return prefix_lm_of(call.mask, call.L, call.S)

    def work(self, call, plan):
        """The prefix rows unmasked against the prefix, the others causal."""
        B, H, _, L, S, _, Ev = cost.dims(call)
        off, P = plan
        r0, p = split_rows(L, S, off, P)
        computed, calls, extra = causal_work(B, H, L - r0, S, Ev, off + r0, call.q.element_size())
        return computed + B * H * r0 * p, calls + (r0 > 0), cost.rate("fused_flops", call.q.dtype), extra, 0.0

    def forward(self, call, plan, q, k, v):
        return prefix_lm_forward(q, k, v, call.scale, *plan)

    def backward(self, call, plan, dout, q, k, v, out, lse, dlse, need):
        return prefix_lm_grads(dout, q, k, v, lse, dlse, *plan, call.scale, need)


def prefix_lm_of(mask, L: int, S: int) -> tuple[int, int] | None:
    """(off, P) of a prefix-LM mask (a key prefix of int length P, or'ed with a causal mask whose
    alignment gives off), or None for any other mask."""
    if type(mask) is not OrMask or len(mask.parts) != 2:
        return None
    kinds = {type(p): p for p in mask.parts}
    prefix, causal = kinds.get(KeyPrefixMask), kinds.get(CausalMask)
    if prefix is None or causal is None or isinstance(prefix.prefix, torch.Tensor):
        return None
    return alignment_offset(causal.align, L, S), prefix.prefix


def split_rows(L: int, S: int, off: int, P: int) -> tuple[int, int]:
    """(r0, P'): rows [0, r0) see exactly the keys [0, P') (P' = min(P, S)); rows [r0, L) see
    the keys [0, i + off]."""
    return min(max(P - off, 0), L), min(P, S)


def prefix_lm_forward(q, k, v, scale: float, off: int, P: int):
    """(out (B, H, L, E) in q's dtype, lse (B, H, L), float32; float64 for float64)."""
    L, S = q.shape[2], k.shape[2]
    r0, p = split_rows(L, S, off, P)
    if r0 == 0:  # every row past the prefix: the causal call alone
        return dense_forward(q, k, v, scale, off)
    # an empty prefix (p = 0) leaves its rows, before the first key, seeing nothing
    first = forward_op()(q[:, :, :r0], k[:, :, :p], v[:, :, :p], scale=scale) if p > 0 else None
    rest = dense_forward(q[:, :, r0:], k, v, scale, off + r0) if r0 < L else None
    return join_rows(q, v, r0, first, rest)


def prefix_lm_grads(dout, q, k, v, lse, dlse, off: int, P: int, scale: float, need):
    """(dq, dk, dv) in the inputs' dtypes (None where ``need`` is False), from dout (B, H, L, E) or
    None, the forward's lse (B, H, L) and dlse (B, H, L) or None."""
    L, S = q.shape[2], k.shape[2]
    r0, p = split_rows(L, S, off, P)

    def rows(t, a, b):
        return None if t is None else t[:, :, a:b]

    def add(dout, grads):
        dq, dk, dv = grads
        if r0 > 0 and p > 0:  # the prefix rows: unmasked against the keys [0, p)
            add_causal_grads(dout[:, :, :r0], q[:, :, :r0], k[:, :, :p], v[:, :, :p], lse[:, :, :r0],
                             rows(dlse, 0, r0), None, scale, (rows(dq, 0, r0), rows(dk, 0, p), rows(dv, 0, p)))
        if r0 < L:
            add_causal_grads(dout[:, :, r0:], q[:, :, r0:], k, v, lse[:, :, r0:], rows(dlse, r0, L), off + r0, scale,
                             (rows(dq, r0, L), dk, dv))

    return summed_grads(dout, q, k, v, need, add)


PREFIX_LM = PrefixLMRoute()
