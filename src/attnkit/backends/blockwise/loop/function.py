"""The blockwise ``torch.autograd.Function``: saves q, k, v, out and lse (O(n) training memory)
and runs :mod:`.backward` from them.

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E query/key dim,
Ev value dim.
"""

from __future__ import annotations

import torch

from .backward import loop_backward
from .forward import loop_forward
from .plan import Plan

__all__ = ["BlockwiseFunction"]


class BlockwiseFunction(torch.autograd.Function):
    """(plan, qx, kx, v, *params) -> (out in the work dtype, lse in natural units, row max m in the
    tiles' units, row sum ell); m and ell are what the backward recomputes the weights from (see
    :func:`.forward.loop_forward`), returned so they can be saved, and not differentiable.

    ``setup_context`` is separate from ``forward`` and the forward is functional, so torch.func
    (vmap, grad) can run it: ``generate_vmap_rule`` lets vmap batch it by running it on batched
    tensors."""

    generate_vmap_rule = True

    @staticmethod
    def forward(plan: Plan, qx, kx, v, *params):
        return loop_forward(plan, qx, kx, v)

    @staticmethod
    def setup_context(ctx, inputs, output):
        plan, qx, kx, v, *params = inputs
        out, _, m, ell = output
        ctx.plan = plan
        ctx.mark_non_differentiable(m, ell)
        ctx.save_for_backward(qx, kx, v, out, m, ell, *params)
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx, dout, dlse, _dm, _dell):
        plan = ctx.plan
        qx, kx, v, out, m, ell, *params = ctx.saved_tensors
        need = ctx.needs_input_grad[1:4]
        if dout is None:
            dout = torch.zeros_like(out)
        create_graph = torch.is_grad_enabled()  # backward(create_graph=True) / autograd.grad(..., create_graph=True)
        with torch.no_grad():  # first order only: the tiles are rebuilt in place from saved row statistics
            dq, dk, dv, dparams = loop_backward(plan, qx, kx, v, out, m, ell, dout.contiguous(), dlse, params, need)
        grads = (
            dq.to(qx.dtype) if need[0] else None,
            dk.to(kx.dtype) if need[1] else None,
            dv.to(v.dtype) if need[2] else None,
            *[None if g is None else g.to(p.dtype) for g, p in zip(dparams, params)],
        )
        if create_graph and not torch._C._functorch.is_functorch_wrapped_tensor(qx):
            grads = fail_when_differentiated(grads, (qx, kx, v, dout, dlse, *params))
        return (None, *grads)


NO_DOUBLE_BACKWARD = (
    "the blockwise backend does not support double backward (differentiating its gradients: gradgradcheck, "
    "gradient penalties, torch.autograd.grad(..., create_graph=True) followed by another backward): its backward "
    "rebuilds each tile from the forward's saved row max and sum, which it treats as constants; use "
    "backend='reference' (twice differentiable) for this call"
)


def fail_when_differentiated(grads: tuple, sources: tuple) -> tuple:
    """The gradients, as outputs of a node that raises :data:`NO_DOUBLE_BACKWARD` if anything
    differentiates through them (``torch.autograd.function.once_differentiable``'s device, with a
    message that names the backend to use). The node also takes the ``sources`` that require grad
    (q, k, v, the incoming gradient, bias parameters), so a second derivative with respect to any
    of them reaches it and raises, instead of reading as zero. Using the gradients as values stays free."""
    idx = [i for i, g in enumerate(grads) if g is not None]
    links = [t for t in sources if isinstance(t, torch.Tensor) and t.requires_grad]
    if not idx or not links:
        return grads
    err = torch._C._functions.DelayedError(NO_DOUBLE_BACKWARD.encode(), len(idx) + len(links))
    wrapped = err(*[grads[i].detach().requires_grad_() for i in idx], *links)[: len(idx)]
    out = list(grads)
    for i, w in zip(idx, wrapped):
        out[i] = w
    return tuple(out)


class BlockwiseFunctionCtx(torch.autograd.Function):
    """The same function in the older ``forward(ctx, ...)`` style, used while torch.compile traces:
    Dynamo (torch 2.13) binds the ``ctx`` of a ``setup_context``-style forward to its first
    argument here, the plan. Same forward, same backward."""

    @staticmethod
    def forward(ctx, plan: Plan, qx, kx, v, *params):
        outputs = BlockwiseFunction.forward(plan, qx, kx, v, *params)
        BlockwiseFunction.setup_context(ctx, (plan, qx, kx, v, *params), outputs)
        return outputs

    backward = BlockwiseFunction.backward
