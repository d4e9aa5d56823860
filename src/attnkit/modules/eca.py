"""Efficient Channel Attention: a 1-D convolution across channels, no dimensionality reduction.

Wang, Wu, Zhu, Li, Zuo & Hu, "ECA-Net: Efficient Channel Attention for Deep Convolutional Neural
Networks", CVPR 2020, https://arxiv.org/abs/1910.03151 (§3.3, Eq. 12):

    z = mean_{h,w} x                              (B, C)
    s = sigmoid(conv1d_k(z))                      (B, C): each channel sees its k nearest channels
    y = s[:, :, None, None] * x

with the kernel size adapted to the channel count, k = ψ(C) = |log2(C)/γ + b/γ|_odd. The paper's
``|t|_odd`` is taken as its released code does (github.com/BangguWu/ECANet): ``t = int(|(log2 C + b)
/ γ|)``, plus one when even. With γ = 2, b = 1 this gives k = 3, 5, 5, 5, 5, 7 for
C = 64, 128, 256, 512, 1024, 2048. The convolution has no bias, so ECA adds exactly k parameters.

Shape legend: B batch, C channels, H height, W width; k kernel size.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .gate import Gate, check_feature_map, require_positive_int


def eca_kernel_size(channels: int, gamma: float = 2, b: float = 1) -> int:
    """ψ(C) = |log2(C)/γ + b/γ|_odd, as in the ECA-Net code (truncate, then +1 if even)."""
    require_positive_int("channels", channels)
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not gamma > 0:
        raise ValueError(f"gamma must be a positive number (2 in the paper), got {gamma!r}")
    if isinstance(b, bool) or not isinstance(b, (int, float)):
        raise ValueError(f"b must be a number (1 in the paper), got {b!r}")
    t = int(abs((math.log2(channels) + b) / gamma))
    return max(t if t % 2 else t + 1, 1)


class ECA(nn.Module):
    """``ECA(channels, k=None, gamma=2, b=1)``: k=None uses the adaptive ψ(C); an explicit k must be odd."""

    def __init__(self, channels: int, k: int | None = None, gamma: float = 2, b: float = 1, *, device=None, dtype=None):
        super().__init__()
        if k is None:
            k = eca_kernel_size(channels, gamma, b)
        else:
            if (gamma, b) != (2, 1):
                raise ValueError(f"gamma and b only choose k when k=None; got k={k} with gamma={gamma}, b={b}; drop one of them")
            require_positive_int("channels", channels)
            require_positive_int("k", k)
            if k % 2 == 0:
                # an even kernel cannot be centred on its channel: the output would shift by half a channel
                raise ValueError(f"k must be odd so the kernel is centred on each channel, got k={k}; use k={k + 1} or k=None (adaptive)")
        self.channels, self.k, self.gamma, self.b = channels, k, gamma, b
        self.weight = nn.Parameter(torch.empty(1, 1, k, device=device, dtype=dtype))
        self.gate = Gate("channel")
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # PyTorch's Conv1d default (kaiming-uniform, a=√5): bound 1/√fan_in with fan_in = k
        bound = 1.0 / math.sqrt(self.k)
        nn.init.uniform_(self.weight, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = check_feature_map(x, self.channels, "ECA")
        z = x.mean(dim=(2, 3))  # (B, C)
        # channels as the 1-D signal: (B, 1, C); zero padding k//2 keeps C outputs
        logits = F.conv1d(z.unsqueeze(1), self.weight, padding=self.k // 2).squeeze(1)  # (B, C)
        return x * self.gate(logits)[:, :, None, None]

    def extra_repr(self) -> str:
        return f"channels={self.channels}, k={self.k}"
