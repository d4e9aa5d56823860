"""Differential attention: the difference of two softmax maps, so common-mode noise cancels.

Ye et al. 2024, "Differential Transformer", https://arxiv.org/abs/2410.05258 §2.1 (DiffLlama in
transformers follows it). Split the H query heads into two halves (Q1, Q2), the key heads likewise
(K1, K2), and join the value heads pairwise into H/2 heads of width 2E. For head pair i:

    A1 = softmax(Q1_i K1ᵀ · scale)        A2 = softmax(Q2_i K2ᵀ · scale)
    o_i = (A1 − λ · A2) · V_i             V_i (S, 2E)
    o_i ← (1 − λ_init) · RMSNorm(o_i)      per head, no learned gain ("GroupNorm" in the paper)

Both maps put some weight on irrelevant tokens; a learned λ subtracts the part they share, like a
differential amplifier, leaving a sparser map (weights may be negative). λ is a scalar per layer,
re-parameterised so that it learns at the pace of the other weights:

    λ = exp(λ_q1 · λ_k1) − exp(λ_q2 · λ_k2) + λ_init,     λ_q1, λ_k1, λ_q2, λ_k2 ∈ R^E

and λ_init = 0.8 − 0.6 · exp(−0.3 · depth) grows with the layer's depth (0 for the first layer).
The norm is needed because the difference has a much smaller scale than either map; multiplying by
(1 − λ_init) brings the output back to the scale of ordinary attention at initialisation.

Causal masks, windows, rotary positions and caches work as in
:class:`~attnkit.modules.decoder_attention.DecoderAttention`, which this class extends: only the
attention step differs (two calls sharing one value tensor). ``need_weights`` returns A1 − λ·A2.

Shape legend: x (B, L, D); q (B, H, L, E); k, v (B, Hkv, S, E); pairs (B, H/2, L, 2E).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..core.call import attention
from .decoder_attention import DecoderAttention
from .rms_norm import RMSNorm


def lambda_init_for(depth: int) -> float:
    """The paper's λ_init for the layer at 0-based ``depth``: 0.8 − 0.6 · exp(−0.3 · depth)."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise ValueError(f"depth must be the layer's 0-based index (an int >= 0), got {depth!r}")
    return 0.8 - 0.6 * math.exp(-0.3 * depth)


class DifferentialAttention(DecoderAttention):
    """DIFF Transformer attention; needs an even number of query and key/value heads.

    ``depth`` sets λ_init (:func:`lambda_init_for`); ``lambda_std`` the init of the four λ vectors;
    other arguments as :class:`DecoderAttention` (no sinks, softcap or gate: the paper defines none).
    """

    def __init__(self, embed_dim: int, num_heads: int, *, depth: int = 0, lambda_std: float = 0.1, eps: float = 1e-5, **kwargs):
        for unsupported in ("sinks", "softcap", "gate"):
            if kwargs.get(unsupported):
                raise ValueError(f"DifferentialAttention does not take {unsupported}= (the paper defines no such variant); use DecoderAttention")
        super().__init__(embed_dim, num_heads, **kwargs)
        if self.num_heads % 2 or self.kv_heads % 2:
            raise ValueError(f"DifferentialAttention pairs heads, so num_heads and kv_heads must be even, got {self.num_heads} and {self.kv_heads}")
        E = self.head_dim
        self.lambda_init = lambda_init_for(depth)
        dev = {k: kwargs[k] for k in ("device", "dtype") if k in kwargs}
        self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2 = (nn.Parameter(torch.randn(E, **dev) * lambda_std) for _ in range(4))
        self.pair_norm = RMSNorm(2 * E, eps=eps, affine=False)

    def lam(self) -> torch.Tensor:
        """λ = exp(λ_q1·λ_k1) − exp(λ_q2·λ_k2) + λ_init (a 0-d tensor, differentiable)."""
        dt = torch.promote_types(self.lambda_q1.dtype, torch.float32)  # float32 at least, as DiffLlama sums
        one = torch.exp(torch.sum(self.lambda_q1 * self.lambda_k1, dtype=dt))
        two = torch.exp(torch.sum(self.lambda_q2 * self.lambda_k2, dtype=dt))
        return one - two + self.lambda_init

    def attend(self, q, k, v, mask, need_weights: bool):
        """(A1 − λ A2) · V per head pair, normed → (out (B, L, H, E), weights (B, H/2, L, S) or None)."""
        B, H, L, E = q.shape
        hk = self.kv_heads // 2
        pairs = torch.cat((v[:, :hk], v[:, hk:]), dim=-1)  # (B, Hkv/2, S, 2E): value head g beside head g + Hkv/2
        one = attention(q[:, : H // 2], k[:, :hk], pairs, mask=mask, scale=self.scale, return_weights=need_weights)
        two = attention(q[:, H // 2:], k[:, hk:], pairs, mask=mask, scale=self.scale, return_weights=need_weights)
        lam = self.lam().to(q.dtype)
        diff = one.out - lam * two.out  # (B, H/2, L, 2E)
        out = (1 - self.lambda_init) * self.pair_norm(diff)
        weights = one.weights - lam * two.weights if need_weights else None
        # (B, L, H/2, 2E) read as (B, L, H, E): pair i's 2E numbers fill heads 2i, 2i+1 of o_proj's input
        return out.transpose(1, 2).reshape(B, L, H, E), weights

    def extra_repr(self) -> str:
        return super().extra_repr() + f", lambda_init={self.lambda_init:.4g}"
