"""The blockwise ``torch.autograd.Function``: saves q, k, v, out and lse (O(n) training memory)
and runs :mod:`.backward` from them.

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E query/key dim,
Ev value dim.
"""

from __future__ import annotations

import torch

from .backward import _backward
from .forward import _forward
from .plan import LN2, LOG2E, _Plan

__all__ = ["_BlockwiseFunction"]


class _BlockwiseFunction(torch.autograd.Function):
    """(plan, qx, kx, v, *params) -> (out in the work dtype, lse in natural units).

    ``setup_context`` is separate from ``forward`` and the forward is functional, so torch.func
    (vmap, grad) can run it: ``generate_vmap_rule`` lets vmap batch it by running it on batched
    tensors."""

    generate_vmap_rule = True

    @staticmethod
    def forward(plan: _Plan, qx, kx, v, *params):
        out, lse2 = _forward(plan, qx, kx, v)
        return out, lse2 * LN2

    @staticmethod
    def setup_context(ctx, inputs, output):
        plan, qx, kx, v, *params = inputs
        out, lse = output
        ctx.plan = plan
        ctx.save_for_backward(qx, kx, v, out, lse * LOG2E, *params)
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx, dout, dlse):
        plan = ctx.plan
        qx, kx, v, out, lse2, *params = ctx.saved_tensors
        need = ctx.needs_input_grad[1:4]
        if dout is None:
            dout = torch.zeros_like(out)
        dq, dk, dv, dparams = _backward(plan, qx, kx, v, out, lse2, dout.contiguous(), dlse, params, need)
        return (
            None,
            dq.to(qx.dtype) if need[0] else None,
            dk.to(kx.dtype) if need[1] else None,
            dv.to(v.dtype) if need[2] else None,
            *[None if g is None else g.to(p.dtype) for g, p in zip(dparams, params)],
        )


class _BlockwiseFunctionCtx(torch.autograd.Function):
    """The same function in the older ``forward(ctx, ...)`` style, used while torch.compile traces:
    Dynamo (torch 2.13) binds the ``ctx`` of a ``setup_context``-style forward to its first
    argument here, the plan. Same forward, same backward."""

    @staticmethod
    def forward(ctx, plan: _Plan, qx, kx, v, *params):
        out, lse = _BlockwiseFunction.forward(plan, qx, kx, v, *params)
        _BlockwiseFunction.setup_context(ctx, (plan, qx, kx, v, *params), (out, lse))
        return out, lse

    backward = _BlockwiseFunction.backward
