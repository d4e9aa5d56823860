"""Multi-head Latent Attention (MLA), with a latent cache and absorbed decoding.

DeepSeek-AI 2024, "DeepSeek-V2", https://arxiv.org/abs/2405.04434 §2.1; used unchanged in
DeepSeek-V3 (https://arxiv.org/abs/2412.19437 §2.1.1).

**The layer.** For a token x (D,), with H heads:

    q_h = [q_h^N ; q_h^R]            q = W_Q x, or W_QB · RMSNorm(W_QA x) with a q_lora_rank
    [c ; k^R] = W_KVA x               c (r,) the latent, k^R (dr,) one rotary key for all heads
    c ← RMSNorm(c)
    k_h = [W_UK_h c ; RoPE(k^R)]      W_UK_h (dn × r): row block h of kv_b_proj
    v_h = W_UV_h c                    W_UV_h (dv × r)
    o   = W_O [softmax_s(q_h·k_h,s · scale) · v_h,s]_h

so key and value of every head are linear images of one r-vector. The cache therefore stores
``[c ; RoPE(k^R)]`` only (:class:`~attnkit.modules.latent_cache.LatentCache`), r + dr numbers per
token instead of H·(dn + dr + dv).

**Why absorption is exact.** The score of head h, query t, key s is

    q_h,t · k_h,s = q^N_h,t · (W_UK_h c_s) + q^R_h,t · k^R_s
                  = (W_UK_hᵀ q^N_h,t) · c_s + q^R_h,t · k^R_s          (associativity: aᵀ(Wc) = (Wᵀa)ᵀc)
                  = [q̃_h,t ; q^R_h,t] · [c_s ; k^R_s]

and the output of head h is

    Σ_s p_h,t,s W_UV_h c_s = W_UV_h (Σ_s p_h,t,s c_s)                  (linearity of W_UV_h)

Both are rearrangements of the same sums, so nothing is approximated: with the absorbed query
``q̃ = [W_UKᵀ q^N ; q^R]`` (H heads, r + dr wide) the layer is ordinary **multi-query attention**
over one key head ``[c ; k^R]`` (the cache itself) and one value head ``c`` (its first r columns),
followed by ``W_UV_h`` per head and then W_O. The softmax scale stays 1/sqrt(dn + dr), the width of
the original heads. In floating point the two orders round differently, by ~1e-7 relative in float32.

**Which order is cheaper** depends on the shape. Per batch row, with L new and S cached tokens:

    expand:  S·r·H·(dn + dv)          (kv_b_proj over every cached latent)
             + H·L·S·(dn + dr + dv)   (attention at head width)
    absorb:  L·H·r·(dn + dv)          (W_UK into the query, W_UV after attention)
             + H·L·S·(2r + dr)        (attention at latent width)

Decoding (L = 1) pays S·r·H·(dn + dv) to expand and only H·S·(2r + dr) to absorb: with
DeepSeek-V2-Lite's widths (H=16, r=512, dn=128, dr=64, dv=128) at S = 4096 that is 8.6 G
multiply-adds against 73 M. A full prefill (L = S) makes the expansion cheap relative to its
attention, whose latent width 2r + dr is 3.4× the expanded 320, so expansion wins there.
``path="auto"`` compares these two counts per call; ``benchmarks/mla_decode.py`` times both orders
for L = 1, 8, 64, 512 new tokens over 4096 and records whether the rule picked the faster one.

Shape legend: x (B, L, D); q (B, H, L, dn + dr); latent cache (B, 1, S, r + dr); out (B, L, D).
"""

from __future__ import annotations

import torch
from torch import nn

from ..core import masks as M
from ..core.call import attention
from ..core.checks import require_choice, require_positive_int, require_tensor
from .cache_positions import PositionedMask
from .decoder_attention import resolve_positions
from .frequency_rotary import FrequencyRotary
from .latent_cache import LatentCache
from .rms_norm import RMSNorm

PATHS = ("auto", "absorb", "expand")


def plan_cost(L: int, S: int, *, heads: int, kv_lora_rank: int, qk_nope_dim: int, qk_rope_dim: int, v_dim: int) -> dict[str, int]:
    """Multiply-adds per batch row of each order (see the module docstring): {"expand": n, "absorb": n}."""
    H, r, dn, dr, dv = heads, kv_lora_rank, qk_nope_dim, qk_rope_dim, v_dim
    return {
        "expand": S * r * H * (dn + dv) + H * L * S * (dn + dr + dv),
        "absorb": L * H * r * (dn + dv) + H * L * S * (2 * r + dr),
    }


class MultiHeadLatentAttention(nn.Module):
    """DeepSeek's MLA. ``forward(x, *, positions=None, cache=None, need_weights=False) -> (out, weights | None)``; causal.

    ``path`` picks the order: ``"absorb"``, ``"expand"`` or ``"auto"`` (the cheaper by
    :func:`plan_cost`, per call). ``rotary`` is any ``f(x (B, H, L, dr), positions) -> x``;
    the default is interleaved RoPE with base 10000 over the dr rotary dims, as in DeepSeek.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        kv_lora_rank: int,
        qk_nope_dim: int,
        qk_rope_dim: int,
        v_dim: int,
        q_lora_rank: int | None = None,
        rotary: nn.Module | None = None,
        scale: float | None = None,
        bias: bool = False,
        eps: float = 1e-6,
        path: str = "auto",
        device=None,
        dtype=None,
    ):
        super().__init__()
        for name, n in (("embed_dim", embed_dim), ("num_heads", num_heads), ("kv_lora_rank", kv_lora_rank),
                        ("qk_nope_dim", qk_nope_dim), ("qk_rope_dim", qk_rope_dim), ("v_dim", v_dim)):
            require_positive_int(name, n)
        if qk_rope_dim % 2:
            raise ValueError(f"qk_rope_dim must be even (RoPE rotates pairs), got {qk_rope_dim}")
        self.embed_dim, self.num_heads, self.kv_lora_rank = embed_dim, num_heads, kv_lora_rank
        self.qk_nope_dim, self.qk_rope_dim, self.v_dim, self.q_lora_rank = qk_nope_dim, qk_rope_dim, v_dim, q_lora_rank
        self.path = require_choice("path", path, PATHS)
        self.scale = (qk_nope_dim + qk_rope_dim) ** -0.5 if scale is None else float(scale)
        kw = dict(device=device, dtype=dtype)
        H, dq = num_heads, qk_nope_dim + qk_rope_dim
        if q_lora_rank is None:
            self.q_proj = nn.Linear(embed_dim, H * dq, bias=False, **kw)
        else:
            require_positive_int("q_lora_rank", q_lora_rank)
            self.q_proj = nn.Sequential(nn.Linear(embed_dim, q_lora_rank, bias=bias, **kw), RMSNorm(q_lora_rank, eps=eps, **kw),
                                        nn.Linear(q_lora_rank, H * dq, bias=False, **kw))
        self.kv_a_proj = nn.Linear(embed_dim, kv_lora_rank + qk_rope_dim, bias=bias, **kw)
        self.kv_norm = RMSNorm(kv_lora_rank, eps=eps, **kw)
        self.kv_b_proj = nn.Linear(kv_lora_rank, H * (qk_nope_dim + v_dim), bias=False, **kw)
        self.o_proj = nn.Linear(H * v_dim, embed_dim, bias=bias, **kw)
        if rotary is None:
            inv = 1.0 / 10000.0 ** (torch.arange(0, qk_rope_dim, 2, dtype=torch.float64) / qk_rope_dim)
            rotary = FrequencyRotary(inv, interleaved=True)
        self.rotary = rotary

    # the two halves of kv_b_proj ------------------------------------------------------------------
    def up_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(W_UK (H, dn, r), W_UV (H, dv, r)): views of ``kv_b_proj.weight``, row block h per head."""
        w = self.kv_b_proj.weight.view(self.num_heads, self.qk_nope_dim + self.v_dim, self.kv_lora_rank)
        return w[:, : self.qk_nope_dim], w[:, self.qk_nope_dim:]

    def new_cache(self, max_len: int | None = None) -> LatentCache:
        """An empty :class:`LatentCache` for this layer (r + dr numbers per token)."""
        return LatentCache(max_len)

    def choose_path(self, L: int, S: int) -> str:
        """"absorb" or "expand" for L new queries over S keys (``path`` unless it is "auto")."""
        if self.path != "auto":
            return self.path
        cost = plan_cost(L, S, heads=self.num_heads, kv_lora_rank=self.kv_lora_rank, qk_nope_dim=self.qk_nope_dim,
                         qk_rope_dim=self.qk_rope_dim, v_dim=self.v_dim)
        return "absorb" if cost["absorb"] < cost["expand"] else "expand"

    # forward ---------------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor, *, positions: torch.Tensor | None = None, cache: LatentCache | None = None, need_weights: bool = False):
        """x (B, L, D) → ((B, L, D), weights (B, H, L, S) or None). ``positions`` (L,) or (B, L): default 0..L-1, or after the cache."""
        require_tensor("x", x)
        if x.dim() != 3 or x.shape[-1] != self.embed_dim:
            raise ValueError(f"x must be (B, L, D={self.embed_dim}), got shape {tuple(x.shape)}")
        if cache is not None and not isinstance(cache, LatentCache):
            raise TypeError(f"cache must be a LatentCache (from .new_cache()), got {type(cache).__name__}")
        B, L, _ = x.shape
        pos = resolve_positions(positions, cache, B, L, x.device)  # (B, L)
        q_nope, q_rope, latent, k_rope = self.project(x, pos)
        if cache is None:
            kv, k_pos, in_order = torch.cat((latent, k_rope), -1)[:, None], pos, positions is None
        else:
            kv, k_pos = cache.update(latent, k_rope, None if positions is None else pos)
            in_order = cache.in_order
        where = (pos, k_pos, in_order)
        if self.choose_path(L, kv.shape[2]) == "absorb":
            out, weights = self.attend_absorbed(q_nope, q_rope, kv, where, need_weights)
        else:
            out, weights = self.attend_expanded(q_nope, q_rope, kv, where, need_weights)
        return self.o_proj(out), weights  # (B, L, D)

    def project(self, x: torch.Tensor, pos: torch.Tensor):
        """x (B, L, D) → q_nope (B, H, L, dn), rotated q_rope (B, H, L, dr), latent (B, L, r), rotated k_rope (B, L, dr)."""
        B, L, _ = x.shape
        q = self.q_proj(x).view(B, L, self.num_heads, -1).transpose(1, 2)  # (B, H, L, dn + dr)
        q_nope, q_rope = q.split([self.qk_nope_dim, self.qk_rope_dim], dim=-1)
        latent, k_rope = self.kv_a_proj(x).split([self.kv_lora_rank, self.qk_rope_dim], dim=-1)  # (B, L, r), (B, L, dr)
        q_rope = self.rotary(q_rope, pos)
        k_rope = self.rotary(k_rope[:, None], pos)[:, 0]  # one rotary key for all heads
        return q_nope, q_rope, self.kv_norm(latent), k_rope

    def attend_absorbed(self, q_nope, q_rope, kv, where, need_weights: bool = False):
        """MQA over the latent: q̃ = [W_UKᵀ q_nope ; q_rope] (B, H, L, r + dr), k = kv, v = c = kv[..., :r] → (B, L, H·dv).

        With one key/value head, the H heads are H more query rows of a single head: q̃ is attended as
        (B, 1, H·L, r + dr), the causal mask reading each row's position, so the cache is read as it
        lies, never repeated per head (a GQA backend would copy it H times)."""
        B, H, L, _ = q_nope.shape
        w_uk, w_uv = self.up_weights()
        q_lat = torch.einsum("bhld,hdr->bhlr", q_nope, w_uk)  # (B, H, L, r)
        q_abs = torch.cat((q_lat, q_rope), dim=-1).reshape(B, 1, H * L, -1)  # row h·L + l is head h, token l
        pos, k_pos, in_order = where
        mask = None if (L == 1 and in_order) else PositionedMask(M.causal(), pos.repeat(1, H), k_pos)
        # the value is c = kv[..., :r]; attending the whole row [c | k_rope] and dropping the last dr
        # output columns is the same result without a copy (CPU's fused kernel wants Ev == E and would
        # otherwise pad a copy of the whole cache every step)
        res = attention(q_abs, kv, kv, mask=mask, scale=self.scale, return_weights=need_weights)
        o_lat = res.out[..., : self.kv_lora_rank]  # (B, 1, H·L, r)
        out = torch.einsum("bhlr,hvr->blhv", o_lat.reshape(B, H, L, -1), w_uv)  # (B, L, H, dv)
        return out.reshape(B, L, -1), None if res.weights is None else res.weights.view(B, H, L, -1)

    def attend_expanded(self, q_nope, q_rope, kv, where, need_weights: bool = False):
        """Every cached latent through kv_b_proj: per-head keys (B, H, S, dn + dr), values (B, H, S, dv) → (B, L, H·dv)."""
        B, _, S, _ = kv.shape
        H, r = self.num_heads, self.kv_lora_rank
        kvb = self.kv_b_proj(kv[:, 0, :, :r]).view(B, S, H, -1).transpose(1, 2)  # (B, H, S, dn + dv)
        k_nope, v = kvb.split([self.qk_nope_dim, self.v_dim], dim=-1)
        k = torch.cat((k_nope, kv[:, :, :, r:].expand(B, H, S, self.qk_rope_dim)), dim=-1)
        mask = _causal_mask(q_nope.shape[2], *where)
        res = attention(torch.cat((q_nope, q_rope), -1), k, v, mask=mask, scale=self.scale, return_weights=need_weights)
        return res.out.transpose(1, 2).reshape(B, res.out.shape[2], -1), res.weights  # (B, L, H·dv), (B, H, L, S) or None

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, kv_lora_rank={self.kv_lora_rank}, q_lora_rank={self.q_lora_rank}, "
                f"qk_nope_dim={self.qk_nope_dim}, qk_rope_dim={self.qk_rope_dim}, v_dim={self.v_dim}, path={self.path!r}")


def _causal_mask(L: int, q_pos: torch.Tensor, k_pos: torch.Tensor, in_order: bool) -> M.Mask | None:
    """Causal by position. Default positions: no mask for one new query, bottom-right causal otherwise."""
    if in_order:
        return None if L == 1 else M.causal("bottom_right")
    return PositionedMask(M.causal(), q_pos, k_pos)
