"""Transformer encoder and decoder layers built on attnkit's :class:`MultiHeadAttention`.

Vaswani et al. 2017, https://arxiv.org/abs/1706.03762 §3.1–3.3. An encoder layer is
self-attention then a position-wise feed-forward network ``W₂ act(W₁ x + b₁) + b₂``; a decoder
layer adds cross-attention over the encoder output ("memory") between the two, and its
self-attention is causal. Each sub-layer sits in a residual connection with dropout, and the
LayerNorm goes

* after the residual (``norm_first=False``, post-LN, the paper): ``x = LN(x + Sublayer(x))``;
* before the sub-layer (``norm_first=True``, pre-LN, Xiong et al. 2020,
  https://arxiv.org/abs/2002.04745, which trains without learning-rate warm-up):
  ``x = x + Sublayer(LN(x))``.

Names and semantics follow ``torch.nn.TransformerEncoderLayer`` / ``TransformerDecoderLayer``
(``self_attn``, ``multihead_attn``, ``linear1``, ``linear2``, ``norm1..3``, ``dropout1..3``), so
:meth:`from_torch` copies a torch layer's weights and the outputs agree to float rounding — the
parity test in ``tests/models/test_transformer.py``.

Decoding: the decoder layer takes one :mod:`attnkit.cache` cache for its self-attention (it grows
by one token per step; causal alignment is bottom-right, so the new token sees every cached one)
and one :class:`~attnkit.cache.CrossAttentionCache` whose encoder keys/values are projected on the
first step and reused after, so a step costs O(t + S), not O(t² + t·S).

Shape legend: B batch, L target length, S source length, D d_model, F dim_feedforward.
src/tgt (B, L, D), memory (B, S, D); ``valid`` masks are (B, S) bool, True = real token.
"""

from __future__ import annotations

import torch
from torch import nn

from ..core.checks import require_choice, require_positive_int, require_probability
from .multihead import MultiHeadAttention

ACTIVATIONS = {"relu": nn.functional.relu, "gelu": nn.functional.gelu}


class _FeedForwardLayer(nn.Module):
    """What both layers share: the FFN, the norms/dropouts and the residual wiring."""

    n_sublayers = 2

    def __init__(self, d_model, dim_feedforward, dropout, activation, norm_first, layer_norm_eps, bias, kw):
        super().__init__()
        require_positive_int("d_model", d_model)
        require_positive_int("dim_feedforward", dim_feedforward)
        self.activation_name = require_choice("activation", activation, tuple(ACTIVATIONS))
        self.activation = ACTIVATIONS[activation]
        self.norm_first = bool(norm_first)
        p = require_probability("dropout", dropout)
        self.linear1 = nn.Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = nn.Dropout(p)
        self.linear2 = nn.Linear(dim_feedforward, d_model, bias=bias, **kw)
        for i in range(1, self.n_sublayers + 1):
            setattr(self, f"norm{i}", nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw))
            setattr(self, f"dropout{i}", nn.Dropout(p))

    def _ff(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(x))))

    def _residual(self, x: torch.Tensor, i: int, sublayer) -> torch.Tensor:
        """Sub-layer i (1-based) with its residual, dropout and LayerNorm in pre- or post-LN order."""
        norm, drop = getattr(self, f"norm{i}"), getattr(self, f"dropout{i}")
        if self.norm_first:
            return x + drop(sublayer(norm(x)))
        return norm(x + drop(sublayer(x)))

    @staticmethod
    def _config_from_torch(layer) -> dict:
        a = layer.activation
        if a is nn.functional.relu or isinstance(a, nn.ReLU):
            act = 1
        elif a is nn.functional.gelu or (isinstance(a, nn.GELU) and a.approximate == "none"):
            act = 2
        else:
            raise ValueError(f"from_torch supports activation 'relu' or 'gelu' only, got {a!r}; build the torch layer with one of them")
        return dict(
            d_model=layer.linear1.in_features, nhead=layer.self_attn.num_heads, dim_feedforward=layer.linear1.out_features,
            dropout=layer.dropout.p, activation="relu" if act == 1 else "gelu", norm_first=layer.norm_first,
            layer_norm_eps=layer.norm1.eps, bias=layer.linear1.bias is not None,
        )

    def _copy_torch(self, layer, attn_names: tuple[str, ...]) -> None:
        own = {k: v for k, v in layer.state_dict().items() if not any(k.startswith(n + ".") for n in attn_names)}
        result = self.load_state_dict(own, strict=False)
        stray = result.unexpected_keys + [k for k in result.missing_keys if not k.startswith(attn_names)]
        if stray:  # pragma: no cover - torch renamed a parameter
            raise ValueError(f"from_torch: the torch layer's parameters do not map onto attnkit's: {stray}")
        for name in attn_names:
            getattr(self, name).load_state_dict(MultiHeadAttention.from_torch(getattr(layer, name)).state_dict())


class TransformerEncoderLayer(_FeedForwardLayer):
    """Self-attention + FFN. ``forward(src, valid=None)`` → (B, S, D)."""

    def __init__(
        self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1, *,
        activation: str = "relu", norm_first: bool = False, layer_norm_eps: float = 1e-5, bias: bool = True,
        rotary=None, backend: str = "auto", device=None, dtype=None,
    ):
        kw = {"device": device, "dtype": dtype}
        super().__init__(d_model, dim_feedforward, dropout, activation, norm_first, layer_norm_eps, bias, kw)
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias, rotary=rotary, backend=backend, **kw)

    def forward(self, src: torch.Tensor, *, valid: torch.Tensor | None = None) -> torch.Tensor:
        x = self._residual(src, 1, lambda h: self.self_attn(h, attention_mask=valid)[0])
        return self._residual(x, 2, self._ff)

    @classmethod
    def from_torch(cls, layer: nn.TransformerEncoderLayer, **kwargs) -> "TransformerEncoderLayer":
        """attnkit's layer with the weights of a batch_first ``torch.nn.TransformerEncoderLayer``."""
        if not isinstance(layer, nn.TransformerEncoderLayer):
            raise TypeError(f"from_torch needs a torch.nn.TransformerEncoderLayer, got {type(layer).__name__}")
        w = layer.linear1.weight
        new = cls(**cls._config_from_torch(layer), device=w.device, dtype=w.dtype, **kwargs)
        new._copy_torch(layer, ("self_attn",))
        return new


class TransformerDecoderLayer(_FeedForwardLayer):
    """Causal self-attention + cross-attention + FFN, with optional KV caches for decoding."""

    n_sublayers = 3

    def __init__(
        self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1, *,
        activation: str = "relu", norm_first: bool = False, layer_norm_eps: float = 1e-5, bias: bool = True,
        rotary=None, backend: str = "auto", device=None, dtype=None,
    ):
        kw = {"device": device, "dtype": dtype}
        super().__init__(d_model, dim_feedforward, dropout, activation, norm_first, layer_norm_eps, bias, kw)
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias, rotary=rotary, backend=backend, **kw)
        # cross-attention keys are source positions, queries target ones: no shared rotary frame
        self.multihead_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias, backend=backend, **kw)

    def forward(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        *,
        memory_valid: torch.Tensor | None = None,
        self_cache=None,
        cross_cache=None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Returns ``(out (B, L, D), cross-attention weights (B, L, S) averaged over heads, or None)``.

        With ``self_cache`` the L tokens continue the cached prefix. With ``cross_cache`` the first
        call projects ``memory`` (and remembers ``memory_valid``); later calls reuse it.
        """
        weights = []

        def cross(h):
            if cross_cache is not None and cross_cache.initialized:
                out, w = self.multihead_attn(h, cache=cross_cache, need_weights=need_weights)
            else:
                out, w = self.multihead_attn(h, memory, cache=cross_cache, attention_mask=memory_valid, need_weights=need_weights)
            weights.append(w)
            return out

        x = self._residual(tgt, 1, lambda h: self.self_attn(h, causal=True, cache=self_cache)[0])
        x = self._residual(x, 2, cross)
        return self._residual(x, 3, self._ff), weights[0]

    @classmethod
    def from_torch(cls, layer: nn.TransformerDecoderLayer, **kwargs) -> "TransformerDecoderLayer":
        """attnkit's layer with the weights of a batch_first ``torch.nn.TransformerDecoderLayer``."""
        if not isinstance(layer, nn.TransformerDecoderLayer):
            raise TypeError(f"from_torch needs a torch.nn.TransformerDecoderLayer, got {type(layer).__name__}")
        w = layer.linear1.weight
        new = cls(**cls._config_from_torch(layer), device=w.device, dtype=w.dtype, **kwargs)
        new._copy_torch(layer, ("self_attn", "multihead_attn"))
        return new
