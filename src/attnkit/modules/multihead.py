"""Multi-head attention built on :func:`attnkit.attention`.

Vaswani et al. 2017, https://arxiv.org/abs/1706.03762 §3.2.2: project queries, keys and values
into H heads, attend in each head, concatenate, project out. Grouped-query attention (Ainslie et
al. 2023, https://arxiv.org/abs/2305.13245) uses ``kv_heads`` < ``num_heads`` key/value heads, each
shared by ``num_heads / kv_heads`` query heads; ``kv_heads=1`` is multi-query attention.

Shape legend (batch_first): query (B, L, D), key (B, S, Dk), value (B, S, Dv), out (B, L, D);
weights (B, L, S) averaged over heads or (B, H, L, S) per head.
"""

from __future__ import annotations

import torch
from torch import nn

from ..core import masks as M
from ..core.call import attention
from ..core.checks import require_ndim, require_positive_int, require_probability, require_tensor
from ..core.output import AttentionOutput
from ..core.scores import Score, as_score


class MultiHeadAttention(nn.Module):
    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        kv_heads: int | None = None,
        kdim: int | None = None,
        vdim: int | None = None,
        bias: bool = True,
        dropout: float = 0.0,
        batch_first: bool = True,
        score=None,
        backend: str = "auto",
        device=None,
        dtype=None,
    ):
        super().__init__()
        require_positive_int("embed_dim", embed_dim)
        require_positive_int("num_heads", num_heads)
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim must be divisible by num_heads, got embed_dim={embed_dim}, num_heads={num_heads}; pick num_heads dividing {embed_dim}")
        kv_heads = num_heads if kv_heads is None else require_positive_int("kv_heads", kv_heads)
        if num_heads % kv_heads:
            raise ValueError(f"num_heads must be a multiple of kv_heads for GQA/MQA, got num_heads={num_heads}, kv_heads={kv_heads}")
        self.embed_dim, self.num_heads, self.kv_heads = embed_dim, num_heads, kv_heads
        self.head_dim = embed_dim // num_heads
        self.kdim, self.vdim = kdim or embed_dim, vdim or embed_dim
        self.dropout = require_probability("dropout", dropout)
        self.batch_first = bool(batch_first)
        self.backend = backend
        sc = as_score(score)
        sc.check_head_dim(self.head_dim)
        self.score: Score = sc
        kw = {"device": device, "dtype": dtype}
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **kw)
        self.k_proj = nn.Linear(self.kdim, kv_heads * self.head_dim, bias=bias, **kw)
        self.v_proj = nn.Linear(self.vdim, kv_heads * self.head_dim, bias=bias, **kw)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **kw)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform projections and zero biases, as in the Transformer paper and PyTorch."""
        for lin in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            nn.init.xavier_uniform_(lin.weight)
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)

    # ------------------------------------------------------------------------------------------
    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        *,
        mask=None,
        key_padding_mask: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        causal: bool = False,
        bias=None,
        need_weights: bool = False,
        average_attn_weights: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Returns ``(out, weights or None)``.

        ``mask``: True = may attend (Mask, bool tensor or predicate). ``key_padding_mask``: torch's
        convention, (B, S) True = padding. ``attention_mask``: Hugging Face's, (B, S) 1 = token.
        ``causal``: bottom-right aligned causal mask. All given masks are combined with AND.
        """
        out, res = self.attend(
            query, key, value, mask=mask, key_padding_mask=key_padding_mask, attention_mask=attention_mask,
            causal=causal, bias=bias, need_weights=need_weights,
        )
        w = res.weights
        if w is not None and average_attn_weights:
            w = w.mean(dim=1)
        return out, w

    def attend(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        *,
        mask=None,
        key_padding_mask: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        causal: bool = False,
        bias=None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, AttentionOutput]:
        """Like :meth:`forward` but returns the full :class:`AttentionOutput` (report, lse, per-head weights)."""
        query, key, value = self._inputs(query, key, value)
        q, k, v = self.project(query, key, value)
        combined = combine_masks(mask, key_padding_mask, attention_mask, causal)
        res = attention(
            q, k, v, score=self.score, mask=combined, bias=bias,
            dropout_p=self.dropout if self.training else 0.0,
            backend=self.backend, return_weights=need_weights,
        )
        out = self.merge(res.out)
        if not self.batch_first:
            out = out.transpose(0, 1)
        return out, res

    # pieces ----------------------------------------------------------------------------------
    def _inputs(self, query, key, value):
        require_tensor("query", query)
        key = query if key is None else key
        value = key if value is None else value
        for name, t, d in (("query", query, self.embed_dim), ("key", key, self.kdim), ("value", value, self.vdim)):
            require_tensor(name, t)
            legend = "(B, L, D)" if self.batch_first else "(L, B, D)"
            require_ndim(name, t, 3, legend, "batch a single sequence with .unsqueeze(0)" if self.batch_first else "")
            if t.shape[-1] != d:
                raise ValueError(f"{name} last dim must be {d}, got shape {tuple(t.shape)}")
        if not self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        if key.shape[:2] != value.shape[:2]:
            raise ValueError(f"key and value must agree on (B, S), got {tuple(key.shape[:2])} and {tuple(value.shape[:2])}")
        if query.shape[0] != key.shape[0]:
            raise ValueError(f"query and key must have the same batch size, got {query.shape[0]} and {key.shape[0]}")
        return query, key, value

    def project(self, query, key, value):
        """(B, L, D) inputs → q (B, H, L, E), k (B, Hkv, S, E), v (B, Hkv, S, E)."""
        B, L, _ = query.shape
        S = key.shape[1]
        q = self.q_proj(query).view(B, L, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(key).view(B, S, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(value).view(B, S, self.kv_heads, self.head_dim).transpose(1, 2)
        return q, k, v

    def merge(self, out: torch.Tensor) -> torch.Tensor:
        """(B, H, L, E) → (B, L, D) through the output projection."""
        B, H, L, E = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(B, L, H * E))

    # conversion ------------------------------------------------------------------------------
    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention, **kwargs) -> "MultiHeadAttention":
        """Copy the weights of a ``torch.nn.MultiheadAttention`` (same outputs, fp32 ≤ 1e-5)."""
        if not isinstance(mha, nn.MultiheadAttention):
            raise TypeError(f"from_torch needs a torch.nn.MultiheadAttention, got {type(mha).__name__}")
        if mha.bias_k is not None or mha.add_zero_attn:
            raise ValueError("from_torch: add_bias_kv and add_zero_attn have no attnkit equivalent; build without them")
        w = mha.in_proj_weight
        ref = w if w is not None else mha.q_proj_weight
        new = cls(
            mha.embed_dim, mha.num_heads, kdim=mha.kdim, vdim=mha.vdim, bias=mha.in_proj_bias is not None,
            dropout=mha.dropout, batch_first=mha.batch_first, device=ref.device, dtype=ref.dtype, **kwargs,
        )
        E = mha.embed_dim
        with torch.no_grad():
            if w is not None:
                ws = w.split(E, dim=0)
            else:
                ws = (mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight)
            for lin, wt in zip((new.q_proj, new.k_proj, new.v_proj), ws):
                lin.weight.copy_(wt)
            if mha.in_proj_bias is not None:
                for lin, bt in zip((new.q_proj, new.k_proj, new.v_proj), mha.in_proj_bias.split(E)):
                    lin.bias.copy_(bt)
            new.out_proj.weight.copy_(mha.out_proj.weight)
            if mha.out_proj.bias is not None:
                new.out_proj.bias.copy_(mha.out_proj.bias)
        return new

    def to_torch(self) -> nn.MultiheadAttention:
        """A ``torch.nn.MultiheadAttention`` with the same weights (needs kv_heads == num_heads and the scaled-dot score)."""
        if self.kv_heads != self.num_heads:
            raise ValueError(f"to_torch: torch's module has no GQA; kv_heads={self.kv_heads} must equal num_heads={self.num_heads}")
        if self.score.name != "scaled_dot":
            raise ValueError(f"to_torch: torch's module computes only scaled dot scores, this one uses {self.score.name!r}")
        has_bias = self.q_proj.bias is not None
        w = self.q_proj.weight
        mha = nn.MultiheadAttention(
            self.embed_dim, self.num_heads, dropout=self.dropout, bias=has_bias, kdim=self.kdim, vdim=self.vdim,
            batch_first=self.batch_first, device=w.device, dtype=w.dtype,
        )
        with torch.no_grad():
            if mha._qkv_same_embed_dim:
                mha.in_proj_weight.copy_(torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight]))
            else:
                mha.q_proj_weight.copy_(self.q_proj.weight)
                mha.k_proj_weight.copy_(self.k_proj.weight)
                mha.v_proj_weight.copy_(self.v_proj.weight)
            if has_bias:
                mha.in_proj_bias.copy_(torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias]))
                mha.out_proj.bias.copy_(self.out_proj.bias)
            mha.out_proj.weight.copy_(self.out_proj.weight)
        return mha

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, kv_heads={self.kv_heads}, score={self.score.name!r}, backend={self.backend!r}"


def combine_masks(mask=None, key_padding_mask=None, attention_mask=None, causal: bool = False) -> M.Mask | None:
    """AND of every mask given, each converted to the True = may-attend polarity."""
    parts = []
    if mask is not None:
        parts.append(M.as_mask(mask))
    if key_padding_mask is not None:
        parts.append(M.from_key_padding_mask(key_padding_mask))
    if attention_mask is not None:
        parts.append(M.from_attention_mask(attention_mask))
    if causal:
        parts.append(M.causal("bottom_right"))
    if not parts:
        return None
    out = parts[0]
    for p in parts[1:]:
        out = out & p
    return out
