"""MHSA2d's math written out with plain matmuls — the independent reference the MHSA2d tests compare
against, and the ``naive`` implementation ``benchmarks/vision_cost.py`` times (the way a detector's
MHSA block is usually written: the (heads, N, N) score matrix and softmax materialised).

Shape legend: B batch, C channels, H×W map, N = H·W, nh heads, E = C / nh.
"""

from __future__ import annotations

import math

import torch


def plain_mhsa(m, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x + out_proj(softmax(q kᵀ/√E + bias) v) per head; ``bias`` (nh, N, N) or None.

    The bias is the caller's: the test evaluates the position MLP on every pixel pair (no table),
    the benchmark gathers it from the module's table (what a naive layer does) — so this function
    only holds the attention arithmetic both share.
    """
    B, C, H, W = x.shape
    nh, E = m.num_heads, C // m.num_heads
    s = x.flatten(2).transpose(1, 2)  # (B, N, C)
    a = m.attn

    def heads(t):
        return t.reshape(B, H * W, nh, E).transpose(1, 2)  # (B, nh, N, E)

    q, k, v = heads(a.q_proj(s)), heads(a.k_proj(s)), heads(a.v_proj(s))
    scores = q @ k.transpose(-1, -2) / math.sqrt(E)  # (B, nh, N, N)
    if bias is not None:
        scores = scores + bias
    o = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, H * W, C)
    return x + a.out_proj(o).transpose(1, 2).reshape(B, C, H, W)
