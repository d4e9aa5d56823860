"""The one layout check for PyTorch's fused CPU flash op, shared by every caller of the op: the
blockwise routes (:mod:`..routes`) and the ``sdpa`` backend (:mod:`attnkit.backends.sdpa`).

``_scaled_dot_product_flash_attention_for_cpu`` reads batch, head and sequence through their
strides (any value: 0 from ``expand``, permuted, overlapping) but walks the head dim as if its
stride were 1, with no check: the public ``scaled_dot_product_attention`` checks
``stride(-1) == 1`` before choosing it, the private op does not. So a last dim that is sliced
(``x[..., ::2]``), transposed in storage (``x.transpose(-1, -2)``) or expanded is copied; a size-1
head dim has no stride to get wrong. A size-1 dim whose stride is not the row-major one (an
expanded or channels-last view of a tensor with size-1 dims) is copied too: ``is_contiguous()``
ignores those strides, and with torch 2.13 the ``sdpa`` backend once returned outputs off by 1e10
for k, v of shape (1, 1, 1, E) laid out that way. The blockwise mask routes were checked with
size-1 dims of strides 0, 1, 3, 999 and 7777 against a float64 reference and were exact
(tests/backends/blockwise/kernel/test_layout.py); they take the same check anyway, since it costs
a loop over four strides and copies only such views. The op reads its ``attn_mask`` correctly
whatever its strides (a transposed dense bias: tests/core/test_layouts.py), so that is not copied.
"""

from __future__ import annotations

import torch

__all__ = ["kernel_layout", "odd_unit_strides"]


def kernel_layout(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself, or a contiguous copy where CPU's fused op would misread it (module docstring)."""
    if (t.shape[-1] == 1 or t.stride(-1) == 1) and not odd_unit_strides(t):
        return t
    return t.clone(memory_format=torch.contiguous_format)


def odd_unit_strides(t: torch.Tensor) -> bool:
    """Whether a size-1 dim of ``t`` has a stride other than the row-major one."""
    acc = 1
    for n, st in zip(reversed(t.shape), reversed(t.stride())):
        if n == 1 and st != acc:
            return True
        acc *= n
    return False
