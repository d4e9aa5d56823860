"""The autograd function of the mask routes: the route's kernel forward, and its own backward.

``KernelFunction.apply(route, call, plan, tile_loop, q, k, v)`` runs ``route.forward(call, plan,
q, k, v)`` on inputs in a layout the kernel reads right (:mod:`.layout`) and saves q, k, v, out
and lse; the backward runs ``route.backward(...)`` on them (each route's docstring says how its
gradients are formed). Double backward (``create_graph=True``) re-runs the call on the tile loop
under autograd (``tile_loop(q, k, v) -> (out, lse)``), which then serves or refuses it with its
own error.

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E head dim.
"""

from __future__ import annotations

from typing import Callable

import torch

from .layout import kernel_layout

__all__ = ["KernelFunction"]


class KernelFunction(torch.autograd.Function):
    """(route, call, plan, tile_loop, q, k, v) -> (out in q's dtype, lse in natural units, float32/float64)."""

    @staticmethod
    def forward(ctx, route, call, plan, tile_loop: Callable, q, k, v):
        qc, kc, vc = (kernel_layout(t) for t in (q, k, v))
        out, lse = route.forward(call, plan, qc, kc, vc)
        ctx.route, ctx.call, ctx.plan, ctx.tile_loop = route, call, plan, tile_loop
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        need = ctx.needs_input_grad[4:7]
        if torch.is_grad_enabled():  # double backward: the tile loop under autograd serves or refuses it
            return (None,) * 4 + tuple(_tile_loop_grads(ctx.tile_loop, q, k, v, dout, dlse, need))
        if dout is None and dlse is None:
            return (None,) * 7
        qc, kc, vc = (kernel_layout(t) for t in (q, k, v))
        do = None if dout is None else kernel_layout(dout)
        return (None,) * 4 + tuple(ctx.route.backward(ctx.call, ctx.plan, do, qc, kc, vc, out, lse, dlse, need))


def _tile_loop_grads(tile_loop: Callable, q, k, v, dout, dlse, need):
    """Gradients by re-running the call on the tile loop under autograd (double backward only)."""
    create_graph = torch.is_grad_enabled()
    with torch.enable_grad():
        out, lse = tile_loop(q, k, v)
        outs, grads = [], []
        for t, g in ((out, dout), (lse, dlse)):
            if g is not None:
                outs.append(t)
                grads.append(g.to(t.dtype))
        inputs = [t for t, n in zip((q, k, v), need) if n]
        got = iter(torch.autograd.grad(outs, inputs, grads, create_graph=create_graph, allow_unused=True) if inputs and outs else ())
    res = [next(got) if n and outs else None for n in need]
    return [None if g is None else g.to(t.dtype) for g, t in zip(res, (q, k, v))]
