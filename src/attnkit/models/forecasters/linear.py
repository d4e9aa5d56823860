"""DLinear: a moving-average trend plus a remainder, each mapped to the horizon by one linear layer.

Zeng, Chen, Zhang & Xu 2023, "Are Transformers Effective for Time Series Forecasting?",
https://arxiv.org/abs/2205.13504. Channel-independent with weights shared across channels (the
paper's default ``individual=False``)::

    trend     = moving_average(x, kernel=25)      # edges padded by repeating the end values
    remainder = x - trend
    ŷ         = W_t · trend + W_s · remainder      # W_t, W_s: (T_out, T_in), per channel

Shape legend: B batch, T_in input length, T_out horizon, C_in / C_out channels.
"""

from __future__ import annotations

import torch
from torch import nn

from .base import Forecaster, ForecastSpec


def moving_average(x: torch.Tensor, kernel: int) -> torch.Tensor:
    """x (B, T, C) -> (B, T, C): centred mean over ``kernel`` steps, ends repeated as padding."""
    front = x[:, :1].expand(-1, (kernel - 1) // 2, -1)
    back = x[:, -1:].expand(-1, kernel // 2, -1)
    padded = torch.cat([front, x, back], dim=1).transpose(1, 2)  # (B, C, T + kernel - 1)
    return nn.functional.avg_pool1d(padded, kernel, stride=1).transpose(1, 2)


class DLinearForecaster(Forecaster):
    name = "dlinear"

    def __init__(self, spec: ForecastSpec, kernel: int = 25):
        super().__init__(spec)
        if isinstance(kernel, bool) or not isinstance(kernel, int) or kernel <= 0:
            raise ValueError(f"kernel must be a positive int (the paper uses 25), got {kernel!r}")
        self.kernel = kernel
        self.trend = nn.Linear(spec.input_len, spec.horizon)
        self.seasonal = nn.Linear(spec.input_len, spec.horizon)
        # the paper initialises both maps to a uniform average of the window: a sane starting forecast
        for lin in (self.trend, self.seasonal):
            nn.init.constant_(lin.weight, 1.0 / spec.input_len)
            nn.init.zeros_(lin.bias)

    def forecast(self, past, future_known=None):
        x = past[:, :, list(self.spec.targets)]  # (B, T_in, C_out): channels are independent
        trend = moving_average(x, self.kernel)
        out = self.trend(trend.transpose(1, 2)) + self.seasonal((x - trend).transpose(1, 2))  # (B, C_out, T_out)
        return out.transpose(1, 2)
