"""Causal self-attention as today's decoder LLMs build it: GQA, RoPE, q/k norm, window, sinks, softcap, gate.

One module covers LLaMA (Touvron et al. 2023, https://arxiv.org/abs/2302.13971), Mistral's
sliding window (https://arxiv.org/abs/2310.06825), Qwen3's and Gemma 3's RMSNorm on each query and
key head (Gemma Team 2025, https://arxiv.org/abs/2503.19786), Gemma 2/3's logit soft-cap
``c · tanh(s / c)``, gpt-oss's learned attention sinks (one extra logit per head with a zero value,
https://arxiv.org/abs/2508.10925) and Qwen3-Next's sigmoid output gate
(:mod:`attnkit.modules.gated_attention`). Each feature is an argument holding an object or a number,
so a combination is a constructor call; the maths per token t and head h:

    q_h = RoPE(norm_q(W_Q,h x_t), t)      k_g = RoPE(norm_k(W_K,g x_s), s)     g = h // (H / Hkv)
    s_h,t,s = cap(scale · q_h·k_g)        cap(z) = c · tanh(z / c) when softcap = c
    p_h,t = softmax over {s ≤ t, t - s < window} ∪ {sink_h}
    o_t = W_O [gate_h(x_t) ⊙ Σ_s p_h,t,s v_g,s]_h

Decoding: ``new_cache()`` is a :class:`~attnkit.cache.DynamicCache`, or a
:class:`~attnkit.cache.SlidingWindowCache` holding only the last ``window`` keys for a sliding
layer; keys enter it already rotated at their own position, so a step projects one token.

Shape legend: x (B, L, D); q (B, H, L, E); k, v (B, Hkv, S, E); weights (B, H, L, S).
"""

from __future__ import annotations

import torch
from torch import nn

from ..core import biases as Bi
from ..core import masks as M
from ..core.call import attention
from ..core.checks import require_positive_int, require_tensor
from .cache_base import KVCache
from .cache_kinds import DynamicCache, SlidingWindowCache
from .cache_positions import cache_mask
from .rotary import RotaryEmbedding


class DecoderAttention(nn.Module):
    """Causal GQA self-attention. ``forward(x, *, positions=None, cache=None, need_weights=False) -> (out, weights | None)``.

    ``rotary``: any ``f(x (B, H, L, E), positions) -> x`` (default RoPE, base 10000, rotate-half);
    ``q_norm`` / ``k_norm``: modules applied to each (…, E) head (e.g. ``RMSNorm(E)``);
    ``window``: keys t - window < s ≤ t only; ``sinks``: learn one sink logit per head;
    ``softcap``: cap the scaled logits; ``gate``: an :class:`OutputGate`.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        kv_heads: int | None = None,
        head_dim: int | None = None,
        bias: bool = False,
        rotary: nn.Module | None = None,
        q_norm: nn.Module | None = None,
        k_norm: nn.Module | None = None,
        window: int | None = None,
        sinks: bool = False,
        softcap: float | None = None,
        scale: float | None = None,
        gate: nn.Module | None = None,
        device=None,
        dtype=None,
    ):
        super().__init__()
        require_positive_int("embed_dim", embed_dim)
        require_positive_int("num_heads", num_heads)
        kv_heads = num_heads if kv_heads is None else require_positive_int("kv_heads", kv_heads)
        if num_heads % kv_heads:
            raise ValueError(f"num_heads must be a multiple of kv_heads (each kv head serves num_heads / kv_heads query heads), got {num_heads} and {kv_heads}")
        head_dim = embed_dim // num_heads if head_dim is None else require_positive_int("head_dim", head_dim)
        self.embed_dim, self.num_heads, self.kv_heads, self.head_dim = embed_dim, num_heads, kv_heads, head_dim
        self.window = None if window is None else require_positive_int("window", window)
        if softcap is not None and not softcap > 0:
            raise ValueError(f"softcap must be a positive number or None, got {softcap!r}")
        self.softcap = softcap
        self.scale = head_dim ** -0.5 if scale is None else float(scale)
        kw = dict(device=device, dtype=dtype)
        self.q_proj = nn.Linear(embed_dim, num_heads * head_dim, bias=bias, **kw)
        self.k_proj = nn.Linear(embed_dim, kv_heads * head_dim, bias=bias, **kw)
        self.v_proj = nn.Linear(embed_dim, kv_heads * head_dim, bias=bias, **kw)
        self.o_proj = nn.Linear(num_heads * head_dim, embed_dim, bias=bias, **kw)
        self.q_norm, self.k_norm, self.gate = q_norm, k_norm, gate
        self.rotary = RotaryEmbedding(head_dim, max_positions=8192) if rotary is None else rotary
        self.sinks = nn.Parameter(torch.zeros(num_heads, **kw)) if sinks else None

    def new_cache(self) -> KVCache:
        """An empty cache for this layer: sliding (last ``window`` keys) or dynamic."""
        return DynamicCache() if self.window is None else SlidingWindowCache(self.window)

    def forward(self, x: torch.Tensor, *, positions: torch.Tensor | None = None, cache: KVCache | None = None, need_weights: bool = False):
        """x (B, L, D) → ((B, L, D), weights (B, H, L, S) or None)."""
        require_tensor("x", x)
        if x.dim() != 3 or x.shape[-1] != self.embed_dim:
            raise ValueError(f"x must be (B, L, D={self.embed_dim}), got shape {tuple(x.shape)}")
        if cache is not None and not isinstance(cache, KVCache):
            raise TypeError(f"cache must be an attnkit.cache self-attention cache (from .new_cache()), got {type(cache).__name__}")
        B, L, _ = x.shape
        pos = resolve_positions(positions, cache, B, L, x.device)
        q, k, v = self.project(x, pos)
        if cache is None:
            mask = M.causal() if self.window is None else M.causal() & M.sliding_window(left=self.window - 1, right=0)
        else:
            view = cache.update(k, v, positions=None if positions is None else pos)
            mask, k, v = cache_mask(view, pos, None, causal=True, window=self.window), view.k, view.v
        out, weights = self.attend(q, k, v, mask, need_weights)  # (B, L, H, E)
        if self.gate is not None:
            out = self.gate(out, x)
        return self.o_proj(out.reshape(B, L, -1)), weights

    def project(self, x: torch.Tensor, pos: torch.Tensor):
        """x (B, L, D) → q (B, H, L, E), k and v (B, Hkv, L, E): normed and rotated at ``pos`` (B, L)."""
        B, L, _ = x.shape
        q = self.q_proj(x).view(B, L, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(B, L, self.kv_heads, self.head_dim)
        v = self.v_proj(x).view(B, L, self.kv_heads, self.head_dim).transpose(1, 2)
        if self.q_norm is not None:
            q = self.q_norm(q)
        if self.k_norm is not None:
            k = self.k_norm(k)
        return self.rotary(q.transpose(1, 2), pos), self.rotary(k.transpose(1, 2), pos), v

    def attend(self, q, k, v, mask, need_weights: bool):
        """One attention call → (out (B, L, H, E), weights or None)."""
        res = attention(q, k, v, mask=mask, bias=None if self.softcap is None else Bi.softcap(self.softcap), scale=self.scale,
                        sinks=self.sinks, return_weights=need_weights)
        return res.out.transpose(1, 2), res.weights

    def extra_repr(self) -> str:
        extras = "".join(f", {n}={getattr(self, n)}" for n in ("window", "softcap") if getattr(self, n) is not None)
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, kv_heads={self.kv_heads}, head_dim={self.head_dim}{extras}, sinks={self.sinks is not None}"


def resolve_positions(positions, cache, B: int, L: int, device) -> torch.Tensor:
    """(B, L) absolute positions: given ((L,) or (B, L)), continuing ``cache`` (any cache with
    ``positions_for(B, L, device=)``), or 0..L-1."""
    if positions is None:
        return cache.positions_for(B, L, device=device) if cache is not None else torch.arange(L, device=device).expand(B, L)
    require_tensor("positions", positions)
    if positions.is_floating_point() or positions.shape not in ((L,), (B, L)):
        raise ValueError(f"positions must be an integer (L,)=({L},) or (B, L)=({B}, {L}) tensor, got {positions.dtype} {tuple(positions.shape)}")
    return positions.to(device).long().expand(B, L)
