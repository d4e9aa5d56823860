"""Naive forecast: every future step equals the last observed value.

The baseline of Hyndman & Athanasopoulos, "Forecasting: Principles and Practice" (3rd ed.) §5.2,
https://otexts.com/fpp3/simple-methods.html: ``ŷ_{T+h} = y_T`` for every h.

Shape legend: B batch, T_in input length, T_out horizon, C_in / C_out channels.
"""

from __future__ import annotations

from .base import Forecaster, ForecastSpec


class NaiveForecaster(Forecaster):
    name = "naive"
    trainable = False

    def __init__(self, spec: ForecastSpec):
        super().__init__(spec)

    def forecast(self, past, future_known=None):
        last = past[:, -1, list(self.spec.targets)]  # (B, C_out)
        return last.unsqueeze(1).expand(-1, self.spec.horizon, -1).clone()  # (B, T_out, C_out)
