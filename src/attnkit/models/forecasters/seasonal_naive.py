"""Seasonal naive forecast: every future step equals the value one season earlier.

Hyndman & Athanasopoulos, "Forecasting: Principles and Practice" (3rd ed.) §5.2,
https://otexts.com/fpp3/simple-methods.html: ``ŷ_{T+h} = y_{T+h-m(k+1)}`` with period m and
k = ⌊(h-1)/m⌋, i.e. the last observed season repeated. With 0-based h in [0, T_out) and the
input's last m steps ``past[T_in-m : T_in]``, step h reads ``past[T_in - m + (h mod m)]``.

Shape legend: B batch, T_in input length, T_out horizon, C_in / C_out channels, m period.
"""

from __future__ import annotations

import torch

from .base import Forecaster, ForecastSpec


class SeasonalNaiveForecaster(Forecaster):
    name = "seasonal_naive"
    trainable = False

    def __init__(self, spec: ForecastSpec, period: int | None = None):
        super().__init__(spec)
        m = period if period is not None else spec.period
        if m is None:
            raise ValueError("seasonal_naive needs a period: pass period=m or ForecastSpec(period=m) (e.g. 48 for half-hourly daily cycles)")
        if isinstance(m, bool) or not isinstance(m, int) or m <= 0:
            raise ValueError(f"period must be a positive int, got {m!r}")
        if m > spec.input_len:
            raise ValueError(
                f"seasonal_naive with period={m} needs input_len >= {m}, got input_len={spec.input_len}; "
                "lengthen the input window or use a shorter period"
            )
        self.period = m
        T_in = spec.input_len
        idx = torch.tensor([T_in - m + (h % m) for h in range(spec.horizon)])
        self.register_buffer("index", idx, persistent=False)  # (T_out,) input step read by each forecast step

    def forecast(self, past, future_known=None):
        return past[:, self.index][:, :, list(self.spec.targets)]  # (B, T_out, C_out)
