"""The language model of ``kv_eviction``: a small character-level decoder with rotary positions.

GPT-2's block (Radford et al. 2019): ``x = x + attn(ln1(x)); x = x + mlp(ln2(x))``, rotary queries
and keys (Su et al. 2021, https://arxiv.org/abs/2104.09864). Two ways to run it:

* :meth:`CharLM.forward` — a whole window at once with the causal mask (training, and the
  window-with-recompute baseline, which re-reads the last ``w`` characters at positions 0..w-1);
* :meth:`CharLM.step` — one character per call against one :class:`~.policies.KeptKV` per layer,
  which holds keys **before** rotary and rotates them at their position *in the cache* on every
  step, so a policy may drop any key and the survivors keep positions 0..n-1 (StreamingLLM §3.2).

Shape legend: tokens (B, L) int; logits (B, L, V); D width, H heads, E = D / H head dim.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ... import attention
from ...core import masks as M
from ...modules.rotary import RotaryEmbedding


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(B, L, D) → q, k, v, each (B, H, L, E), before rotary."""
        B, L, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, L, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        return q, k, v

    def finish(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """x (B, L, D) plus the projected attention a (B, H, L, E), then the MLP."""
        B, H, L, E = a.shape
        x = x + self.proj(a.transpose(1, 2).reshape(B, L, H * E))
        return x + self.mlp(self.ln2(x))


class CharLM(nn.Module):
    """Character LM: ``forward(tokens)`` (causal, positions 0..L-1) or ``step(token, kept)``."""

    def __init__(self, vocab: int, dim: int = 128, heads: int = 4, layers: int = 4, max_positions: int = 8192):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.rope = RotaryEmbedding(dim // heads, max_positions=max_positions)

    def forward(self, tokens: torch.Tensor, return_weights: bool = False):
        """tokens (B, L) → logits (B, L, V); with ``return_weights`` also each layer's (B, H, L, L)."""
        x = self.embed(tokens)  # (B, L, D)
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        maps = []
        for blk in self.blocks:
            q, k, v = blk.split(x)
            q, k = self.rope.rotate_qk(q, k, pos)
            res = attention(q, k, v, mask=M.causal(), return_weights=return_weights)
            if return_weights:
                maps.append(res.weights)
            x = blk.finish(x, res.out)
        logits = self.head(self.ln_f(x))
        return (logits, maps) if return_weights else logits

    @torch.no_grad()
    def step(self, token: torch.Tensor, kept: list) -> torch.Tensor:
        """One new character per row: token (B,) → logits (B, V). ``kept``: one KeptKV per layer;
        each appends the new key/value, attends, records the weights and applies its policy."""
        x = self.embed(token)[:, None]  # (B, 1, D)
        for blk, cache in zip(self.blocks, kept):
            q, k, v = blk.split(x)  # (B, H, 1, E) before rotary
            a = cache.attend(q, k, v, self.rope)  # (B, H, 1, E)
            x = blk.finish(x, a)
        return self.head(self.ln_f(x))[:, 0]


def lm_loss(model: nn.Module, batch) -> torch.Tensor:
    """Next-character cross-entropy of a (B, C+1) batch: predict tokens 1..C from 0..C-1."""
    (seq,) = batch
    logits = model(seq[:, :-1])  # (B, C, V)
    return F.cross_entropy(logits.flatten(0, 1), seq[:, 1:].flatten())
