"""``torch.export`` of ``MultiHeadAttention`` with ALiBi and rotary embeddings.

Exporting needs a graph with no data-dependent Python branch: the rotary lookup for positions
0..L-1 is a table slice (no value check), dispatch under tracing takes the most preferred backend,
and the exported program must give the eager module's output on new inputs of the same shape.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import attnkit
from attnkit import biases



class Block(nn.Module):
    """A causal self-attention layer with optional rotary embedding and ALiBi bias."""

    def __init__(self, rotary: bool, alibi: bool):
        super().__init__()
        self.mha = attnkit.MultiHeadAttention(16, 4, kv_heads=2, rotary=attnkit.RotaryEmbedding(4) if rotary else None)
        self.alibi = biases.ALiBi(4) if alibi else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, L, D) -> (B, L, D)
        return self.mha(x, causal=True, bias=self.alibi)[0]


@pytest.mark.parametrize("rotary,alibi", [(True, False), (False, True), (True, True)], ids=["rotary", "alibi", "rotary+alibi"])
def test_export_multihead_attention(rotary, alibi, request):
    torch.manual_seed(0)
    block = Block(rotary, alibi).eval()
    ep = torch.export.export(block, (torch.randn(2, 8, 16),))
    x = torch.randn(2, 8, 16)  # new values, same shape
    torch.testing.assert_close(ep.module()(x), block(x), rtol=1e-6, atol=1e-6)


def test_rotary_default_positions_equal_explicit_positions():
    """The export-friendly table slice (positions=None) is the same rotation as positions 0..L-1."""
    rot = attnkit.RotaryEmbedding(8, max_positions=32)
    x = torch.randn(2, 3, 10, 8, dtype=torch.float64)
    torch.testing.assert_close(rot(x), rot(x, torch.arange(10)), rtol=0, atol=0)
    with pytest.raises(ValueError, match="max_positions"):
        rot(torch.randn(1, 1, 33, 8))
