"""The autograd function of the bias routes: the route's kernel forward, the tile loop's backward.

``BiasFunction.apply(route, call, plan, q, k, v, *params)`` runs ``route.forward(call, plan, q, k,
v)`` on inputs in a layout the kernel reads right (:mod:`.layout`) and saves q, k, v, the lse and
the bias's trainable tensors ``params`` (:mod:`..loop.params`). The backward is the tile loop's
(:mod:`..loop.backward`), fed the kernel's lse as the row shift and the row sums and the output
recomputed with that shift (:func:`.lse_grads.lse_terms`: the output for D = dO · O, which must
match the weights the backward rebuilds), with ``params`` as inputs, so learned tables (T5, Shaw)
and captured tensors get gradients; a forward + backward gains only the forward's share.

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E head dim (Ev = E).
"""

from __future__ import annotations

import torch

from ..loop.backward import loop_backward
from ..loop.function import fail_when_differentiated
from .layout import kernel_layout
from .lse_grads import lse_terms, tile_plan

__all__ = ["BiasFunction"]


class BiasFunction(torch.autograd.Function):
    """(route, call, plan, q, k, v, *params) -> (out, lse)."""

    @staticmethod
    def forward(ctx, route, call, plan, q, k, v, *params):
        qc, kc, vc = (kernel_layout(t) for t in (q, k, v))  # strides the fused op reads right
        out, lse = route.forward(call, plan, qc, kc, vc)
        ctx.call = call
        ctx.save_for_backward(q, k, v, lse, *params)  # the backward recomputes out (.lse_grads.lse_terms)
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, lse, *params = ctx.saved_tensors
        need = ctx.needs_input_grad[3:6]  # after route, call, plan
        if dout is None and dlse is None:
            return (None,) * (6 + len(params))
        plan = tile_plan(q, k, ctx.call.mask, ctx.call.scale, ctx.call.bias)  # float32 or float64 inputs: their dtype
        create_graph = torch.is_grad_enabled()
        with torch.no_grad():
            m, ell, out = lse_terms(plan, q, k, v, lse)
            dout = torch.zeros_like(out) if dout is None else dout
            dq, dk, dv, dparams = loop_backward(plan, q, k, v, out, m, ell, dout.contiguous(), dlse, params, need)
        grads = (dq if need[0] else None, dk if need[1] else None, dv if need[2] else None,
                 *[None if g is None else g.to(p.dtype) for g, p in zip(dparams, params)])
        if create_graph:
            grads = fail_when_differentiated(grads, (q, k, v, dout, dlse, *params))
        return (None, None, None, *grads)
