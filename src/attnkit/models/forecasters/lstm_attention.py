"""LSTM encoder-decoder with temporal attention of every decoder step over all encoder states.

The :class:`LSTMForecaster` plus Luong et al. 2015's global attention
(https://arxiv.org/abs/1508.04025, eq. 5): decoder state h_t queries the encoder states
h̄_1..h̄_{T_in} through :class:`attnkit.modules.temporal_attention.TemporalAttention`, and the
output reads the attentional state ``h̃_t = tanh(W_c [c_t; h_t])``. The weights say which past
steps (lags) each forecast step drew on; :meth:`forecast_with_weights` returns them.

Shape legend: B batch, T_in input length, T_out horizon, C_in / C_k / C_out channels, D hidden size.
"""

from __future__ import annotations

import torch
from torch import nn

from ...modules.temporal_attention import TemporalAttention
from .base import ForecastSpec
from .lstm import LSTMForecaster


class LSTMAttentionForecaster(LSTMForecaster):
    name = "lstm_attention"

    def __init__(self, spec: ForecastSpec, hidden: int = 64, layers: int = 1, dropout: float = 0.0, score="general"):
        super().__init__(spec, hidden=hidden, layers=layers, dropout=dropout)
        self.attention = TemporalAttention(hidden, hidden, score=score)
        self.combine = nn.Linear(2 * hidden, hidden)

    def forecast_with_weights(self, past, future_known=None):
        """-> (forecast (B, T_out, C_out), weights (B, T_out, T_in)); weights[:, t, s] is step s's share."""
        future_known = self.check_inputs(past, future_known)
        return self._forecast_with_weights(past, future_known)

    def _forecast_with_weights(self, past, future_known):
        states, dec, mean, std = self.encode_decode(past, future_known)
        att = self.attention(dec, states)  # context (B, T_out, D), weights (B, T_out, T_in)
        h_tilde = torch.tanh(self.combine(torch.cat([att.context, dec], dim=-1)))  # (B, T_out, D)
        return self._denorm(self.head(h_tilde), mean, std), att.weights

    def forecast(self, past, future_known=None):
        return self._forecast_with_weights(past, future_known)[0]
