"""Which calls PyTorch's fused CPU flash kernel can serve at all: the one kernel-eligibility check
every fused route (:mod:`..routes`) starts from, written once.

A fused route may serve a call only when all of these hold (each route then adds its own mask or
bias condition; otherwise the tile loop runs, with the same results within rounding):

* CPU tensors, eager mode (not while ``torch.compile`` traces, not inside ``torch.func``);
* the plain (scaled) dot score, no dropout, no returned weights, E == Ev and a non-empty batch;
* no tile sizes asked for through ``attnkit.options`` (asking for tiles asks for the tile loop;
  the ``block_q`` / ``block_kv`` arguments of :func:`attnkit.backends.blockwise.blockwise_attention`
  skip the routes before they are asked);
* the kernel passed its self-test for the dtype and is enabled (:mod:`.gate`).

The mask routes take calls without a bias (:func:`mask_kernel_eligible`); the bias routes take an
additive bias, in float32 or float64 only (:func:`bias_kernel_eligible`: bf16 would round the bias
to 8 bits in the kernel's float mask).

Shape legend: q (B, H, L, E), k (B, Hkv, S, E), v (B, Hkv, S, Ev).
"""

from __future__ import annotations

import torch

from ....core.options import current as current_options
from .gate import available

__all__ = ["kernel_eligible", "mask_kernel_eligible", "bias_kernel_eligible", "BIAS_DTYPES"]

BIAS_DTYPES = (torch.float32, torch.float64)  # the kernel's float mask keeps a bias exact in these


def _wrapped(*ts: torch.Tensor) -> bool:
    return any(torch._C._functorch.is_functorch_wrapped_tensor(t) for t in ts)


def kernel_eligible(call, dtypes: tuple[torch.dtype, ...] | None = None) -> bool:
    """Whether the fused kernel can serve ``call`` whatever its mask and bias (module docstring);
    ``dtypes``: the input dtypes the route accepts (None: every dtype the kernel's gate passes)."""
    q, k, v = call.q, call.k, call.v
    if q.device.type != "cpu" or torch.compiler.is_compiling() or _wrapped(q, k, v):
        return False
    if not getattr(call.score, "identity_dot", False) or call.dropout_p > 0 or call.return_weights:
        return False
    if q.shape[-1] != v.shape[-1] or q.shape[0] == 0:
        return False
    if dtypes is not None and q.dtype not in dtypes:
        return False
    opts = current_options()
    if opts.block_q is not None or opts.block_kv is not None:
        return False
    return available(q.dtype)


def mask_kernel_eligible(call) -> bool:
    """:func:`kernel_eligible` for a call with no bias (the mask routes)."""
    return call.bias is None and kernel_eligible(call)


def bias_kernel_eligible(call) -> bool:
    """:func:`kernel_eligible` for a call with an additive bias, in float32 or float64 (the bias routes)."""
    return call.bias is not None and call.bias.additive and kernel_eligible(call, BIAS_DTYPES)
