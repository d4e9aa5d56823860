"""Squeeze-and-Excitation: channel attention from a global average.

Hu, Shen, Albanie, Sun & Wu, "Squeeze-and-Excitation Networks", CVPR 2018 / TPAMI 2019,
https://arxiv.org/abs/1709.01507 (§3, Fig. 2–3):

    z = mean_{h,w} x[:, :, h, w]                 squeeze           (B, C)
    s = sigmoid(W2 · relu(W1 · z + b1) + b2)     excitation        (B, C), W1: C/r × C, W2: C × C/r
    y = s[:, :, None, None] * x                  channel-wise scale (B, C, H, W)

Parameters added: 2·C²/r (weights) + C/r + C (biases). In an SE-ResNet the block sits on the
residual branch after the last BN, before the identity is added (the paper's Fig. 3); with r = 16
ResNet-50 goes from 25,557,032 to 28,088,024 parameters (the paper's 25.6M → 28.1M, Table 1).

Shape legend: B batch, C channels, H height, W width; r reduction ratio.
"""

from __future__ import annotations

import torch
from torch import nn

from .gate import Gate, check_feature_map, hidden_channels


class SqueezeExcite(nn.Module):
    """``SqueezeExcite(channels, reduction=16)``: (B, C, H, W) → (B, C, H, W), gated per channel."""

    def __init__(self, channels: int, reduction: int = 16, *, device=None, dtype=None):
        super().__init__()
        hidden = hidden_channels(channels, reduction)
        self.channels, self.reduction = channels, reduction
        kw = {"device": device, "dtype": dtype}
        self.fc1 = nn.Linear(channels, hidden, **kw)
        self.act = nn.ReLU(inplace=True)
        self.fc2 = nn.Linear(hidden, channels, **kw)
        self.gate = Gate("channel")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = check_feature_map(x, self.channels, "SqueezeExcite")
        z = x.mean(dim=(2, 3))  # (B, C) squeeze
        s = self.gate(self.fc2(self.act(self.fc1(z))))  # (B, C) excitation
        return x * s[:, :, None, None]

    def extra_repr(self) -> str:
        return f"channels={self.channels}, reduction={self.reduction}"
