"""A sigmoid gate on each head's attention output (Qwen3-Next's gated attention).

Qiu et al. 2025, "Gated Attention for Large Language Models: Non-linearity, Sparsity, and
Attention-Sink-Free", https://arxiv.org/abs/2505.06708 §2–3; Qwen3-Next uses the elementwise form.

Attention's output for head h is a convex mix of value rows, ``o_h = Σ_s p_h,s v_h,s``, and the
output projection is linear, so the path value → output has no non-linearity and a head cannot
say "nothing here" except by parking its weight on some token (an attention sink). The gate
multiplies each head's output by a number in (0, 1) computed from the *query token's* input:

    o'_h = o_h ⊙ σ(x W_g,h)        elementwise: W_g (D × H·E), one gate per head coordinate
    o'_h = o_h · σ(x w_g,h)        headwise:    W_g (D × H),   one gate per head

σ(·) near 0 switches a head off for this token, so the softmax no longer needs a sink to do
nothing; the paper finds the gates sparse (mostly near 0) and the first-token sink gone. Nothing
changes in the attention weights themselves: the gate acts after them, per query token.

Pass an :class:`OutputGate` as ``gate=`` to :class:`~attnkit.modules.decoder_attention.DecoderAttention`.

Shape legend: x (B, L, D); out (B, L, H, E); gate logits (B, L, H, E) or (B, L, H, 1).
"""

from __future__ import annotations

import torch
from torch import nn

from ..core.checks import require_choice, require_positive_int

KINDS = ("elementwise", "headwise")


class OutputGate(nn.Module):
    """``out · sigmoid(x W_g)`` per head (headwise) or per head coordinate (elementwise).

    >>> gate = OutputGate(512, num_heads=8, head_dim=64, kind="headwise")
    >>> layer = DecoderAttention(512, 8, gate=gate)
    """

    def __init__(self, embed_dim: int, num_heads: int, head_dim: int, *, kind: str = "elementwise", bias: bool = False, device=None, dtype=None):
        super().__init__()
        for name, n in (("embed_dim", embed_dim), ("num_heads", num_heads), ("head_dim", head_dim)):
            require_positive_int(name, n)
        self.kind = require_choice("kind", kind, KINDS)
        self.num_heads, self.head_dim = num_heads, head_dim
        width = num_heads * head_dim if kind == "elementwise" else num_heads
        self.proj = nn.Linear(embed_dim, width, bias=bias, device=device, dtype=dtype)

    def gates(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, L, D) → gate values in (0, 1), (B, L, H, E) or (B, L, H, 1)."""
        B, L, _ = x.shape
        return torch.sigmoid(self.proj(x).view(B, L, self.num_heads, -1))

    def forward(self, out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """out (B, L, H, E) gated by the input x (B, L, D) of the same tokens; same shape as out."""
        if out.dim() != 4 or out.shape[2:] != (self.num_heads, self.head_dim) or out.shape[:2] != x.shape[:2]:
            raise ValueError(
                f"OutputGate(num_heads={self.num_heads}, head_dim={self.head_dim}) needs out (B, L, H, E) = (B, L, {self.num_heads}, "
                f"{self.head_dim}) and x (B, L, D) of the same tokens, got out {tuple(out.shape)} and x {tuple(x.shape)}"
            )
        return out * self.gates(x)

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, num_heads={self.num_heads}, head_dim={self.head_dim}"
