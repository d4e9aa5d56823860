"""A tiny pre-norm Transformer encoder whose pieces can be switched off one at a time.

Vaswani et al. 2017, https://arxiv.org/abs/1706.03762. One block is

    h = x + Attention(LayerNorm(x))        # residual: the block adds to its input instead of replacing it
    y = h + MLP(LayerNorm(h))

* residual connection: the ``x +``; without it each sub-layer's output replaces its input;
* layer norm: rescales each token's vector to mean 0, variance 1 (then a learned scale and shift),
  which keeps activations in range as blocks stack;
* sinusoidal positions: ``PE[p, 2i] = sin(p / 10000^(2i/D))``, ``PE[p, 2i+1] = cos(...)``, added to
  the token embeddings; attention alone is blind to order (permuting the inputs permutes the outputs).

Shapes: tokens (B, L) → x (B, L, D) → logits (B, L, V).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ...modules.multihead import MultiHeadAttention


@dataclass(frozen=True)
class Pieces:
    """Which parts of the block are present."""

    residual: bool = True
    layer_norm: bool = True
    positions: bool = True


VARIANTS = {"full": Pieces(), "no residual": Pieces(residual=False), "no layer norm": Pieces(layer_norm=False),
            "no positions": Pieces(positions=False)}


def sinusoidal(length: int, dim: int) -> torch.Tensor:
    """(L, D) sinusoidal position table."""
    pos = torch.arange(length, dtype=torch.float32)[:, None]  # (L, 1)
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, dim, 2, dtype=torch.float32) / dim)  # (D/2,)
    pe = torch.zeros(length, dim)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq)
    return pe


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, pieces: Pieces):
        super().__init__()
        self.pieces = pieces
        norm = nn.LayerNorm if pieces.layer_norm else (lambda d: nn.Identity())
        self.norm1, self.norm2 = norm(dim), norm(dim)
        self.attn = MultiHeadAttention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, _ = self.attn(self.norm1(x))  # (B, L, D)
        h = x + a if self.pieces.residual else a
        m = self.mlp(self.norm2(h))
        return h + m if self.pieces.residual else m


class TinyTransformer(nn.Module):
    """(B, L) tokens → (B, L, V) logits through ``layers`` blocks."""

    def __init__(self, vocab: int, length: int, dim: int, heads: int, layers: int, pieces: Pieces):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.register_buffer("pe", sinusoidal(length, dim) if pieces.positions else torch.zeros(length, dim))
        self.blocks = nn.ModuleList(Block(dim, heads, pieces) for _ in range(layers))
        self.norm = nn.LayerNorm(dim) if pieces.layer_norm else nn.Identity()
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        B, L = tokens.shape
        x = self.embed(tokens) * math.sqrt(self.embed.embedding_dim) + self.pe[:L]  # (B, L, D)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))  # (B, L, V)
