"""LSTM encoder-decoder forecaster, without attention: the whole past passes through one state.

Sutskever, Vinyals & Le 2014, https://arxiv.org/abs/1409.3215 (sequence to sequence), as used for
multi-horizon forecasting: an encoder LSTM reads the input window; its final (h, c) starts a decoder
LSTM that runs over the T_out forecast steps, whose inputs are a learned embedding of the step
number plus the known-future covariates (calendar features) of that step. The decoder never reads
its own earlier outputs or the true future values, so training and forecasting run the same graph
and nothing about the future leaks in. Every window is instance-normalised (:class:`InstanceNorm`).

Shape legend: B batch, T_in input length, T_out horizon, C_in / C_k / C_out channels, D hidden size.
"""

from __future__ import annotations

import torch
from torch import nn

from ...core.checks import require_positive_int
from .base import Forecaster, ForecastSpec, InstanceNorm


class LSTMForecaster(Forecaster):
    name = "lstm"
    uses_known = True

    def __init__(self, spec: ForecastSpec, hidden: int = 64, layers: int = 1, dropout: float = 0.0):
        super().__init__(spec)
        self.hidden = require_positive_int("hidden", hidden)
        require_positive_int("layers", layers)
        self.norm = InstanceNorm()
        self.encoder = nn.LSTM(spec.in_channels, hidden, layers, batch_first=True, dropout=dropout if layers > 1 else 0.0)
        self.step_embedding = nn.Parameter(0.02 * torch.randn(spec.horizon, hidden))  # (T_out, D)
        self.known_proj = nn.Linear(spec.known_channels, hidden) if spec.known_channels else None
        self.decoder = nn.LSTM(hidden, hidden, layers, batch_first=True, dropout=dropout if layers > 1 else 0.0)
        self.head = nn.Linear(self.head_in, spec.out_channels)

    @property
    def head_in(self) -> int:
        return self.hidden

    def encode_decode(self, past, future_known):
        """Normalised past -> (encoder states (B, T_in, D), decoder states (B, T_out, D), mean, std)."""
        mean, std = self.norm.stats(past)
        x = self.norm.normalize(past, mean, std)
        states, (h, c) = self.encoder(x)  # (B, T_in, D)
        dec_in = self.step_embedding.unsqueeze(0).expand(past.shape[0], -1, -1)  # (B, T_out, D)
        if self.known_proj is not None and future_known is not None:
            dec_in = dec_in + self.known_proj(future_known)
        dec, _ = self.decoder(dec_in, (h, c))  # (B, T_out, D)
        return states, dec, mean, std

    def _denorm(self, y, mean, std):
        t = list(self.spec.targets)
        return self.norm.denormalize(y, mean[..., t], std[..., t])

    def forecast(self, past, future_known=None):
        _, dec, mean, std = self.encode_decode(past, future_known)
        return self._denorm(self.head(dec), mean, std)  # (B, T_out, C_out)
