"""The sigmoid gate shared by the channel/spatial attention modules, and their input checks.

SE, ECA and CBAM all end in ``x * sigmoid(logits)``. The sigmoid lives in its own module,
:class:`Gate`, so that :mod:`attnkit.inspect.vision` can read every gate a model computes with a
forward hook — the modules keep nothing on ``self`` between calls.

Shape legend: B batch, C channels, H height, W width (feature maps are channels-first (B, C, H, W)).
"""

from __future__ import annotations

import torch
from torch import nn

from ..core.checks import require_floating, require_tensor

LEGEND = "(B, C, H, W)"


class Gate(nn.Module):
    """``sigmoid(logits)``; ``kind`` says what the gate weighs: ``"channel"`` gates are (B, C, 1, 1),
    ``"spatial"`` gates (B, 1, H, W)."""

    def __init__(self, kind: str):
        super().__init__()
        if kind not in ("channel", "spatial"):
            raise ValueError(f"kind must be 'channel' or 'spatial', got {kind!r}")
        self.kind = kind

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(logits)

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}"


def require_positive_int(name: str, n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{name} must be a positive int, got {n!r}")
    return n


def check_feature_map(x: object, channels: int | None, who: str) -> torch.Tensor:
    """Reject anything but a floating (B, C, H, W) tensor with the module's channel count."""
    x = require_tensor("x", x)
    if x.dim() != 4:
        hint = " (add a batch axis with x.unsqueeze(0))" if x.dim() == 3 else ""
        raise ValueError(f"{who} expects a feature map {LEGEND}, got shape {tuple(x.shape)}{hint}")
    require_floating("x", x)
    if channels is not None and x.shape[1] != channels:
        raise ValueError(
            f"{who} was built for channels={channels} but x has C={x.shape[1]} (shape {tuple(x.shape)}); "
            f"build it with channels={x.shape[1]}"
        )
    return x


def hidden_channels(channels: int, reduction: int) -> int:
    """C / r of the SE/CBAM bottleneck MLP; a reduction larger than the channels leaves no unit."""
    require_positive_int("channels", channels)
    require_positive_int("reduction", reduction)
    if reduction > channels:
        raise ValueError(
            f"reduction={reduction} is larger than channels={channels}, which leaves a bottleneck of "
            f"{channels // reduction} units; use reduction <= {channels} (16 in the papers)"
        )
    return channels // reduction
