"""PatchTST-style forecaster: each channel alone, cut into patches that are the Transformer's tokens.

Nie, Nguyen, Sinthong & Kalagnanam 2023, "A Time Series is Worth 64 Words",
https://arxiv.org/abs/2211.14730. Per channel (channel independence: all channels share the
weights and never attend to each other): instance-normalise, pad the end with ``stride`` copies of
the last value, cut N = (T_in - P) / stride + 2 patches of length P, embed each linearly, add
learned positions, run a Transformer encoder on attnkit attention, flatten the N·D outputs and map
them linearly to the T_out steps. Only the target channels are computed.

Shape legend: B batch, C channels, T_in input length, T_out horizon, P patch length, N patches, D width.
"""

from __future__ import annotations

import torch
from torch import nn

from .base import Forecaster, ForecastSpec, InstanceNorm
from .blocks import EncoderLayer


class PatchTransformerForecaster(Forecaster):
    name = "patch_transformer"

    def __init__(
        self, spec: ForecastSpec, patch_len: int = 16, stride: int = 8, d_model: int = 64, heads: int = 4,
        layers: int = 2, d_ff: int | None = None, dropout: float = 0.1, head_dropout: float = 0.0, score=None,
    ):
        super().__init__(spec)
        for name, val in (("patch_len", patch_len), ("stride", stride)):
            if isinstance(val, bool) or not isinstance(val, int) or val <= 0:
                raise ValueError(f"{name} must be a positive int, got {val!r}")
        if patch_len > spec.input_len:
            raise ValueError(
                f"patch_len={patch_len} is longer than input_len={spec.input_len}; use patch_len <= input_len "
                "(PatchTST uses 16 with stride 8)"
            )
        if d_model % heads:
            raise ValueError(f"d_model must be divisible by heads, got d_model={d_model}, heads={heads}")
        self.patch_len, self.stride = patch_len, stride
        self.num_patches = (spec.input_len - patch_len) // stride + 2  # +1 from the end padding
        self.norm = InstanceNorm()
        self.embed = nn.Linear(patch_len, d_model)
        self.pos = nn.Parameter(0.02 * torch.randn(self.num_patches, d_model))  # (N, D)
        self.encoder = nn.ModuleList(EncoderLayer(d_model, heads, d_ff or 2 * d_model, dropout, score) for _ in range(layers))
        self.final_norm = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Sequential(nn.Flatten(-2), nn.Dropout(head_dropout), nn.Linear(self.num_patches * d_model, spec.horizon))

    def forecast(self, past, future_known=None):
        x = past[:, :, list(self.spec.targets)]  # (B, T_in, C)
        B, T, C = x.shape
        mean, std = self.norm.stats(x)
        x = self.norm.normalize(x, mean, std).transpose(1, 2).reshape(B * C, T)  # (B·C, T_in)
        x = torch.cat([x, x[:, -1:].expand(-1, self.stride)], dim=1)  # (B·C, T_in + stride)
        patches = x.unfold(1, self.patch_len, self.stride)  # (B·C, N, P)
        h = self.drop(self.embed(patches) + self.pos)  # (B·C, N, D)
        for layer in self.encoder:
            h = layer(h)
        y = self.head(self.final_norm(h))  # (B·C, T_out)
        y = y.reshape(B, C, -1).transpose(1, 2)  # (B, T_out, C)
        return self.norm.denormalize(y, mean, std)
