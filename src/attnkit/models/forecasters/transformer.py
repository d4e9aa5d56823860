"""Transformer encoder-decoder forecaster on attnkit attention, decoding all steps at once.

Vaswani et al. 2017, https://arxiv.org/abs/1706.03762, with the one-shot ("generative") decoder of
Informer (Zhou et al. 2021, https://arxiv.org/abs/2012.07436 §3.3): the encoder reads the embedded
input steps plus learned positions; the decoder's T_out queries are learned step embeddings plus
the known-future covariates, and all forecast steps come out of one forward pass (no feedback of
predictions, so no error accumulation and no view of the true future). Instance-normalised windows.

Shape legend: B batch, T_in input length, T_out horizon, C_in / C_k / C_out channels, D model width.
"""

from __future__ import annotations

import torch
from torch import nn

from ...core.checks import require_positive_int
from .base import Forecaster, ForecastSpec, InstanceNorm
from .blocks import DecoderLayer, EncoderLayer


class TransformerForecaster(Forecaster):
    name = "transformer"
    uses_known = True

    def __init__(
        self, spec: ForecastSpec, d_model: int = 64, heads: int = 4, enc_layers: int = 2, dec_layers: int = 1,
        d_ff: int | None = None, dropout: float = 0.1, score=None,
    ):
        super().__init__(spec)
        require_positive_int("d_model", d_model)
        if d_model % heads:
            raise ValueError(f"d_model must be divisible by heads, got d_model={d_model}, heads={heads}")
        d_ff = d_ff or 2 * d_model
        self.norm = InstanceNorm()
        self.embed = nn.Linear(spec.in_channels, d_model)
        self.enc_pos = nn.Parameter(0.02 * torch.randn(spec.input_len, d_model))  # (T_in, D)
        self.dec_query = nn.Parameter(0.02 * torch.randn(spec.horizon, d_model))  # (T_out, D)
        self.known_proj = nn.Linear(spec.known_channels, d_model) if spec.known_channels else None
        self.encoder = nn.ModuleList(EncoderLayer(d_model, heads, d_ff, dropout, score) for _ in range(enc_layers))
        self.decoder = nn.ModuleList(DecoderLayer(d_model, heads, d_ff, dropout, score) for _ in range(dec_layers))
        self.final_norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, spec.out_channels)
        self.drop = nn.Dropout(dropout)

    def forecast(self, past, future_known=None):
        B = past.shape[0]
        mean, std = self.norm.stats(past)
        x = self.drop(self.embed(self.norm.normalize(past, mean, std)) + self.enc_pos)  # (B, T_in, D)
        for layer in self.encoder:
            x = layer(x)
        q = self.dec_query.unsqueeze(0).expand(B, -1, -1)  # (B, T_out, D)
        if self.known_proj is not None and future_known is not None:
            q = q + self.known_proj(future_known)
        for layer in self.decoder:
            q = layer(q, x)
        y = self.head(self.final_norm(q))  # (B, T_out, C_out)
        t = list(self.spec.targets)
        return self.norm.denormalize(y, mean[..., t], std[..., t])
