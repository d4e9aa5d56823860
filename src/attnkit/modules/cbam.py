"""CBAM: channel attention from average *and* max pooling, then spatial attention.

Woo, Park, Lee & Kweon, "CBAM: Convolutional Block Attention Module", ECCV 2018,
https://arxiv.org/abs/1807.06521 (§3, Eq. 1–3, Fig. 2):

    M_c = sigmoid(MLP(avgpool(x)) + MLP(maxpool(x)))            (B, C, 1, 1), one shared MLP C→C/r→C
    x'  = M_c * x
    M_s = sigmoid(conv_7x7([mean_c(x'); max_c(x')]))            (B, 1, H, W)
    y   = M_s * x'

Channel first, then spatial (the paper's Table 4 finds this order best). Many re-implementations
drop the max-pool branch; here both descriptors go through the same MLP and are summed before the
sigmoid. Spatial attention follows the released code (github.com/Jongchan/attention-module):
a 2→1 convolution without bias followed by BatchNorm — so CBAM adds the SE MLP (2C²/r + C/r + C)
plus 2·k² + 2 parameters per block (k = 7: 100), and CBAM-ResNet-50 has 28,089,624 parameters
(the paper's 28.09M, Table 2).

Shape legend: B batch, C channels, H height, W width; r reduction ratio, k spatial kernel size.
"""

from __future__ import annotations

import torch
from torch import nn

from .gate import Gate, check_feature_map, hidden_channels, require_positive_int


class ChannelAttention(nn.Module):
    """CBAM's channel branch: shared MLP over avg- and max-pooled descriptors, summed, sigmoid."""

    def __init__(self, channels: int, reduction: int = 16, *, device=None, dtype=None):
        super().__init__()
        hidden = hidden_channels(channels, reduction)
        self.channels, self.reduction = channels, reduction
        kw = {"device": device, "dtype": dtype}
        self.mlp = nn.Sequential(nn.Linear(channels, hidden, **kw), nn.ReLU(inplace=True), nn.Linear(hidden, channels, **kw))
        self.gate = Gate("channel")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = check_feature_map(x, self.channels, "ChannelAttention")
        logits = self.mlp(x.mean(dim=(2, 3))) + self.mlp(x.amax(dim=(2, 3)))  # (B, C)
        return x * self.gate(logits)[:, :, None, None]

    def extra_repr(self) -> str:
        return f"channels={self.channels}, reduction={self.reduction}"


class SpatialAttention(nn.Module):
    """CBAM's spatial branch, usable alone: a k×k conv over the channel-wise [mean; max] maps.

    ``channels`` (optional) only checks the input's C, so the factory can build every module
    with ``create_attn(name, channels)``; the branch itself works for any C.
    """

    def __init__(self, channels: int | None = None, kernel_size: int = 7, *, device=None, dtype=None):
        super().__init__()
        if channels is not None:
            require_positive_int("channels", channels)
        require_positive_int("kernel_size", kernel_size)
        if kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd so the map keeps its H×W, got {kernel_size}; use {kernel_size + 1}")
        self.channels, self.kernel_size = channels, kernel_size
        kw = {"device": device, "dtype": dtype}
        self.conv = nn.Conv2d(2, 1, kernel_size, padding=kernel_size // 2, bias=False, **kw)
        self.norm = nn.BatchNorm2d(1, eps=1e-5, momentum=0.01, **kw)  # as in the released code
        self.gate = Gate("spatial")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = check_feature_map(x, self.channels, "SpatialAttention")
        pooled = torch.cat([x.mean(dim=1, keepdim=True), x.amax(dim=1, keepdim=True)], dim=1)  # (B, 2, H, W)
        return x * self.gate(self.norm(self.conv(pooled)))  # (B, 1, H, W) broadcast over C

    def extra_repr(self) -> str:
        return f"channels={self.channels}, kernel_size={self.kernel_size}"


class CBAM(nn.Module):
    """``CBAM(channels, reduction=16, spatial_kernel=7)``: channel attention, then spatial attention."""

    def __init__(self, channels: int, reduction: int = 16, spatial_kernel: int = 7, *, device=None, dtype=None):
        super().__init__()
        self.channel = ChannelAttention(channels, reduction, device=device, dtype=dtype)
        self.spatial = SpatialAttention(channels, spatial_kernel, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.spatial(self.channel(x))
