"""Root-mean-square normalisation, as the attention layers of LLaMA-family models use it.

Zhang & Sennrich 2019, "Root Mean Square Layer Normalization", https://arxiv.org/abs/1910.07467.

    rms(x) = sqrt(mean_i x_i² + eps),    y = x / rms(x) · (offset + w)

over the last axis. No mean is subtracted (unlike LayerNorm). Two parameterisations of the gain
are in use and give the same function with different stored numbers: LLaMA, Qwen3, DeepSeek store
``w`` (initialised to 1, ``offset=0``); Gemma and Qwen3-Next store ``w - 1`` (initialised to 0,
``offset=1``), so weight decay pulls the gain towards 1 instead of 0. The statistics are taken in
float32 at least whatever the input dtype (a bf16 mean of squares loses the small coordinates).

Shape legend: x (..., N), weight (N,).
"""

from __future__ import annotations

import torch
from torch import nn

from ..core.checks import require_positive_int


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x²) + eps) · (offset + weight)`` over the last axis.

    ``offset`` is 0 (gain stored as is: LLaMA, DeepSeek) or 1 (gain stored minus one: Gemma,
    Qwen3-Next). ``affine=False`` keeps no weight (DiffLlama's group norm).
    """

    def __init__(self, dim: int, *, eps: float = 1e-6, offset: float = 0.0, affine: bool = True, device=None, dtype=None):
        super().__init__()
        self.dim = require_positive_int("dim", dim)
        if not isinstance(eps, (int, float)) or isinstance(eps, bool) or eps <= 0:
            raise ValueError(f"eps must be a positive number (1e-6 in LLaMA), got {eps!r}")
        if offset not in (0, 1):
            raise ValueError(f"offset must be 0 (LLaMA-style gain) or 1 (Gemma-style gain stored minus one), got {offset!r}")
        self.eps, self.offset = float(eps), float(offset)
        init = torch.zeros if offset else torch.ones
        self.weight = nn.Parameter(init(dim, device=device, dtype=dtype)) if affine else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.dim:
            raise ValueError(f"RMSNorm(dim={self.dim}) got input with last axis {x.shape[-1]} (shape {tuple(x.shape)}); build it with dim={x.shape[-1]}")
        xf = x.to(torch.promote_types(x.dtype, torch.float32))  # float32 at least; float64 stays float64
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.weight is not None:
            y = y * (self.offset + self.weight.to(xf.dtype))
        return y.to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps:g}, offset={self.offset:g}, affine={self.weight is not None}"
