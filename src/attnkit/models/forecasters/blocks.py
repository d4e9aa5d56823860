"""Pre-norm Transformer layers on :class:`attnkit.MultiHeadAttention`, shared by the Transformer forecasters.

Vaswani et al. 2017, https://arxiv.org/abs/1706.03762, with the layer norm before each sub-layer
(Xiong et al. 2020, https://arxiv.org/abs/2002.04745), which trains without a warm-up at these sizes.
Dropout acts on the sub-layer outputs, not on the attention weights (PatchTST's default too): weight
dropout would force the attention call off the fused SDPA kernel, about 4x slower on CPU here.

Shape legend: B batch, N tokens (time steps or patches), M memory tokens, D model width.
"""

from __future__ import annotations

import torch
from torch import nn

from ...modules.multihead import MultiHeadAttention


def feed_forward(d_model: int, d_ff: int, dropout: float) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model), nn.Dropout(dropout))


class EncoderLayer(nn.Module):
    def __init__(self, d_model: int, heads: int, d_ff: int, dropout: float = 0.1, score=None):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, heads, score=score)
        self.ff = feed_forward(d_model, d_ff, dropout)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, D) -> (B, N, D)
        h = self.norm1(x)
        x = x + self.drop(self.attn(h)[0])
        return x + self.ff(self.norm2(x))


class DecoderLayer(nn.Module):
    """Self-attention among the forecast-step queries, then cross-attention to the encoder memory.

    The queries hold only step embeddings and known-future covariates, never target values, so the
    self-attention needs no causal mask: no query can see a future truth.
    """

    def __init__(self, d_model: int, heads: int, d_ff: int, dropout: float = 0.1, score=None):
        super().__init__()
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.self_attn = MultiHeadAttention(d_model, heads, score=score)
        self.cross_attn = MultiHeadAttention(d_model, heads, score=score)
        self.ff = feed_forward(d_model, d_ff, dropout)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:  # (B, N, D), (B, M, D)
        h = self.norm1(x)
        x = x + self.drop(self.self_attn(h)[0])
        h = self.norm2(x)
        x = x + self.drop(self.cross_attn(h, memory, memory)[0])
        return x + self.ff(self.norm3(x))
