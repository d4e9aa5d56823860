"""Multi-head attention built on :func:`attnkit.attention`.

Vaswani et al. 2017, https://arxiv.org/abs/1706.03762 §3.2.2: project queries, keys and values
into H heads, attend in each head, concatenate, project out. Grouped-query attention (Ainslie et
al. 2023, https://arxiv.org/abs/2305.13245) uses ``kv_heads`` < ``num_heads`` key/value heads, each
shared by ``num_heads / kv_heads`` query heads; ``kv_heads=1`` is multi-query attention.

Incremental decoding: ``forward(x_new, cache=..., causal=True)`` projects only the new tokens,
appends their keys/values to the cache (:mod:`attnkit.cache`) and attends over everything cached,
with bottom-right causal alignment (one new query sees every cached key). Positions (for a
``rotary=`` embedding, Su et al. 2021, https://arxiv.org/abs/2104.09864, and for position biases)
continue per sequence from the cache; with GQA/MQA the cache holds ``kv_heads`` heads, H/Hkv times
smaller than MHA's.

Attention sinks (``sinks=True``; gpt-oss, StreamingLLM, :mod:`attnkit.core.sinks`): one learned
logit per head, zero-initialised, joins every row's softmax with a zero value, in the plain, the
cached and the cross-attention routes alike, so a row may attend to nothing.

Packed variable-length input (``forward(x (T, D), cu_seqlens=...)``, FlashAttention's varlen layout,
no padding computed) lives in :mod:`.mha_packed`. Mask/padding/position handling lives in :mod:`.mha_inputs`, weight conversion to and from
``torch.nn.MultiheadAttention`` in :mod:`.torch_interop`.

Shape legend (batch_first): query (B, L, D), key (B, S, Dk), value (B, S, Dv), out (B, L, D);
weights (B, L, S) averaged over heads or (B, H, L, S) per head.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from ..core import masks as M
from ..core import registry as _registry
from ..core.call import attention
from ..core.checks import require_bool, require_ndim, require_positive_int, require_probability, require_tensor
from ..core.checks import require_unambiguous_2d_mask
from ..core.output import AttentionOutput, Report
from ..core.scores import Score, as_score
from .mha_inputs import _apply_positions, _check_rotary, _new_token_validity, combine_masks
from .mha_packed import attend_packed, refuse_padded_arguments
from .torch_interop import mha_from_torch, mha_to_torch


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
        rotary=None,
        sinks: bool = False,
        device=None,
        dtype=None,
    ):
        super().__init__()
        require_bool("sinks", sinks)
        require_positive_int("embed_dim", embed_dim)
        require_positive_int("num_heads", num_heads)
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim must be divisible by num_heads, got embed_dim={embed_dim}, num_heads={num_heads}; pick num_heads dividing {embed_dim}")
        kv_heads = num_heads if kv_heads is None else require_positive_int("kv_heads", kv_heads)
        if num_heads % kv_heads:
            raise ValueError(f"num_heads must be a multiple of kv_heads for GQA/MQA, got num_heads={num_heads}, kv_heads={kv_heads}")
        self.embed_dim, self.num_heads, self.kv_heads = embed_dim, num_heads, kv_heads
        self.head_dim = embed_dim // num_heads
        self.kdim = embed_dim if kdim is None else require_positive_int("kdim", kdim)
        self.vdim = embed_dim if vdim is None else require_positive_int("vdim", vdim)
        self.dropout = require_probability("dropout", dropout)
        self.batch_first = require_bool("batch_first", batch_first)
        require_bool("bias", bias)
        if backend != "auto":
            _registry.get(backend)  # a misspelt backend fails here, listing the valid names, not at the first forward
        self.backend = backend
        sc = as_score(score)
        if score is None or isinstance(score, str):
            # named scores are shared singletons: own a copy, so .double()/.to() on this module
            # cannot change every other call's score (cosine holds a τ parameter)
            sc = copy.deepcopy(sc)
        sc.check_head_dim(self.head_dim)
        self.score: Score = sc
        self.rotary = _check_rotary(rotary, self.head_dim)
        kw = {"device": device, "dtype": dtype}
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **kw)
        self.k_proj = nn.Linear(self.kdim, kv_heads * self.head_dim, bias=bias, **kw)
        self.v_proj = nn.Linear(self.vdim, kv_heads * self.head_dim, bias=bias, **kw)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **kw)
        # (H,) sink logits, or None; a learned parameter like the projections
        self.sinks = nn.Parameter(torch.empty(num_heads, **kw)) if sinks else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform projections and zero biases, as in the Transformer paper and PyTorch."""
        for lin in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            nn.init.xavier_uniform_(lin.weight)
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)
        if self.sinks is not None:
            nn.init.zeros_(self.sinks)  # a sink of logit 0: weight 1 / (1 + sum of e^score) at the start

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
        cache=None,
        positions: torch.Tensor | None = None,
        rotary=None,
        cu_seqlens: torch.Tensor | None = None,
        cu_seqlens_k: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Returns ``(out, weights or None)``.

        ``mask``: True = may attend (Mask, bool tensor or predicate). ``key_padding_mask``: torch's
        convention, (B, S) True = padding. ``attention_mask``: Hugging Face's, (B, S) 1 = token.
        ``causal``: bottom-right aligned causal mask. All given masks are combined with AND.

        Decoding: ``cache`` is an :mod:`attnkit.cache` object; then ``attention_mask`` /
        ``key_padding_mask`` are (B, L) and describe the *new* tokens (padding is not cached),
        ``mask`` and ``bias`` are evaluated at absolute positions, and ``positions`` (L,) or (B, L)
        overrides the positions that continue each row. ``rotary`` (a RotaryEmbedding) overrides the
        one given at construction.

        Packed input (no padding): ``query`` (T, D) holds N sequences back to back and ``cu_seqlens``
        (N + 1,) their offsets (0, L_0, L_0 + L_1, ..., T); each sequence attends only itself, masks
        align and positions restart per sequence (:mod:`.mha_packed`). For packed cross-attention pass
        ``key`` (T_k, Dk) and ``cu_seqlens_k``. Returns ``(out (T, D), None)``.
        """
        out, res = self.attend(
            query, key, value, mask=mask, key_padding_mask=key_padding_mask, attention_mask=attention_mask,
            causal=causal, bias=bias, need_weights=need_weights, cache=cache, positions=positions, rotary=rotary,
            cu_seqlens=cu_seqlens, cu_seqlens_k=cu_seqlens_k,
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
        cache=None,
        positions: torch.Tensor | None = None,
        rotary=None,
        cu_seqlens: torch.Tensor | None = None,
        cu_seqlens_k: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, AttentionOutput]:
        """Like :meth:`forward` but returns the full :class:`AttentionOutput` (report, lse, per-head weights)."""
        require_bool("need_weights", need_weights)  # a string like "no" would read as True
        require_bool("causal", causal)
        rotary = self.rotary if rotary is None else _check_rotary(rotary, self.head_dim)
        if cu_seqlens is not None or cu_seqlens_k is not None:
            if cu_seqlens is None:
                raise ValueError("cu_seqlens_k was given without cu_seqlens; packed input needs cu_seqlens for the queries")
            refuse_padded_arguments(
                key_padding_mask=key_padding_mask, attention_mask=attention_mask, cache=cache, positions=positions, need_weights=need_weights,
            )
            return attend_packed(
                self, query, key, value, cu_seqlens=cu_seqlens, cu_seqlens_k=cu_seqlens_k, mask=mask, causal=causal, bias=bias, rotary=rotary,
            )
        if cache is not None:
            return self._attend_cached(
                query, key, value, cache=cache, mask=mask, key_padding_mask=key_padding_mask,
                attention_mask=attention_mask, causal=causal, bias=bias, need_weights=need_weights,
                positions=positions, rotary=rotary,
            )
        self_attention = key is None or key is query
        query, key, value = self._inputs(query, key, value)
        if query.shape[1] == 0:  # no queries: an empty (B, 0, D) output
            return self._no_queries(query, key.shape[1], need_weights)
        require_unambiguous_2d_mask(mask, query.shape[0], query.shape[1])  # before it is wrapped as (1, 1, L, S)
        q, k, v = self.project(query, key, value)
        if rotary is not None or positions is not None:
            q, k, bias = _apply_positions(q, k, bias, positions, rotary, self_attention)
        combined = combine_masks(mask, key_padding_mask, attention_mask, causal)
        return self._attention(q, k, v, combined, bias, need_weights)

    def _attend_cached(
        self, query, key, value, *, cache, mask, key_padding_mask, attention_mask, causal, bias, need_weights, positions, rotary
    ) -> tuple[torch.Tensor, AttentionOutput]:
        """One decoding step (or a prompt) against ``cache``; see :mod:`attnkit.modules.cache`."""
        from . import cache as C
        from ..core.biases import as_modifier
        from .cache_base import _batch_msg

        if not isinstance(cache, (C.KVCache, C.CrossAttentionCache)):
            raise TypeError(f"cache must be an attnkit.cache object (DynamicCache, StaticCache, SlidingWindowCache, CrossAttentionCache), got {type(cache).__name__}")
        if isinstance(cache, C.CrossAttentionCache):
            return self._attend_cross_cached(query, key, value, cache, mask, key_padding_mask, attention_mask, causal, bias, need_weights)
        if key is not None and key is not query:
            raise ValueError(f"{type(cache).__name__} is a self-attention cache, so key must be None (or the query); for cross-attention use CrossAttentionCache")
        query, _, _ = self._inputs(query, None, None)
        B, L, _ = query.shape
        if cache.batch_size is not None and cache.batch_size != B:
            raise ValueError(_batch_msg(cache, cache.batch_size, B))
        valid = _new_token_validity(key_padding_mask, attention_mask, B, L, query.device)
        if L == 0:  # no new tokens: nothing to store or attend, an empty (B, 0, D) output
            held = 0 if not cache.initialized else int(cache.lengths.max())
            return self._no_queries(query, min(held, getattr(cache, "window", held)), need_weights)
        q = self.project_q(query)  # (B, H, L, E)
        k, v = self.project_kv(query, query)  # (B, Hkv, L, E) x2
        if positions is None:
            pos = cache.positions_for(B, L, valid, device=q.device)  # (B, L)
        else:
            if not isinstance(positions, torch.Tensor) or positions.is_floating_point() or positions.dtype == torch.bool:
                raise TypeError(f"positions must be an integer tensor (L,) or (B, L), got {getattr(positions, 'dtype', type(positions).__name__)}")
            if positions.shape not in ((L,), (B, L)):
                raise ValueError(f"positions must have shape (L,)=({L},) or (B, L)=({B}, {L}), got {tuple(positions.shape)}")
            if bool((positions < 0).any()):
                raise ValueError(f"positions must be >= 0, got a minimum of {int(positions.min())}")
            pos = positions.to(q.device).long().expand(B, L)
        in_cache = getattr(cache, "positions_in_cache", False)  # SinkCache: a token's position is its rank in the cache
        if rotary is not None and not in_cache:
            q, k = rotary.rotate_qk(q, k, pos)  # keys are cached already rotated at their own positions
        view = cache.update(k, v, positions=None if positions is None else pos, valid=valid)
        if in_cache:  # keys were stored before rotary: rotate every kept key at its position in the cache
            pos = cache.query_positions
            if rotary is not None:
                q, view = rotary(q, pos), view._replace(k=rotary(view.k, view.positions))
        window = cache.window if isinstance(cache, C.SlidingWindowCache) else None
        user_mask = M.as_mask(mask)
        combined = C.cache_mask(view, pos, valid, causal=causal, window=window, mask=user_mask)
        bm = as_modifier(bias)
        if bm is not None:
            bm = C.PositionedBias(bm, pos, view.positions)
        out = self._attention(q, view.k, view.v, combined, bm, need_weights, getattr(cache, "needs_key_scores", False))
        if hasattr(cache, "after_attention"):  # H2O / SnapKV: rank and evict after seeing this step's attention
            cache.after_attention(q, pos, valid, out[1])
        return out

    def _attend_cross_cached(self, query, key, value, cache, mask, key_padding_mask, attention_mask, causal, bias, need_weights):
        B = query.shape[0 if self.batch_first else 1]
        if not cache.initialized:
            if key is None:
                raise ValueError("CrossAttentionCache is empty; the first call must pass key= (the encoder output) to fill it")
            query, key, value = self._inputs(query, key, value)
            valid = _new_token_validity(key_padding_mask, attention_mask, B, key.shape[1], query.device)
            view = cache.store(*self.project_kv(key, value), valid)  # encoder keys projected once
        else:
            if key is not None:
                raise ValueError("CrossAttentionCache already holds encoder keys; pass key=None to reuse them, or reset() it for a new input")
            if key_padding_mask is not None or attention_mask is not None:
                raise ValueError("encoder padding was stored when the CrossAttentionCache was filled; don't pass key_padding_mask/attention_mask again")
            query, _, _ = self._inputs(query, None, None)
            view = cache.view(batch=query.shape[0])
        if query.shape[1] == 0:  # no queries: an empty (B, 0, D) output
            return self._no_queries(query, view.k.shape[2], need_weights)
        combined = combine_masks(mask, causal=causal, key_valid=view.valid)
        return self._attention(self.project_q(query), view.k, view.v, combined, bias, need_weights)

    def _no_queries(self, query: torch.Tensor, S: int, need_weights: bool) -> tuple[torch.Tensor, AttentionOutput]:
        """The result for a (B, 0, D) query against S keys: out (B, 0, D), weights (B, H, 0, S) when
        asked; no backend runs. The empty output still hangs off the projections in autograd."""
        q = self.project_q(query)  # (B, H, 0, E); E == Ev here, so it is also the empty head output
        B, H = q.shape[:2]
        lse_dtype = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
        res = AttentionOutput(
            q, q.new_zeros((B, H, 0, S)) if need_weights else None, q.new_zeros((B, H, 0), dtype=lse_dtype),
            Report(backend="none", reason="no queries (L=0): empty output, no backend run", fully_masked_rows=0),
        )
        out = self.merge(q)
        return (out if self.batch_first else out.transpose(0, 1)), res

    def _attention(self, q, k, v, mask, bias, need_weights, key_scores: bool = False) -> tuple[torch.Tensor, AttentionOutput]:
        """The one attention call of every route (plain, cached, cross-cached), then the output projection."""
        res = attention(
            q, k, v, score=self.score, mask=mask, bias=bias,
            dropout_p=self.dropout if self.training else 0.0, backend=self.backend, return_weights=need_weights,
            sinks=self.sinks, return_key_scores=key_scores,
        )
        out = self.merge(res.out)
        return (out if self.batch_first else out.transpose(0, 1)), res

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
            if t.dtype != self.q_proj.weight.dtype and not torch.is_autocast_enabled(t.device.type):  # autocast mixes on purpose
                raise TypeError(f"{name} has dtype {t.dtype} but the module's weights are {self.q_proj.weight.dtype}; cast the input or the module with .to(dtype)")
        if not self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        if key.shape[:2] != value.shape[:2]:
            raise ValueError(f"key and value must agree on (B, S), got {tuple(key.shape[:2])} and {tuple(value.shape[:2])}")
        if query.shape[0] != key.shape[0]:
            raise ValueError(f"query and key must have the same batch size, got {query.shape[0]} and {key.shape[0]}")
        return query, key, value

    def project(self, query, key, value):
        """(B, L, D) inputs → q (B, H, L, E), k (B, Hkv, S, E), v (B, Hkv, S, E)."""
        return (self.project_q(query), *self.project_kv(key, value))

    def project_q(self, query: torch.Tensor) -> torch.Tensor:
        """query (B, L, D) → q (B, H, L, E)."""
        B, L, _ = query.shape
        return self.q_proj(query).view(B, L, self.num_heads, self.head_dim).transpose(1, 2)

    def project_kv(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """key (B, S, Dk), value (B, S, Dv) → k, v (B, Hkv, S, E)."""
        B, S, _ = key.shape
        k = self.k_proj(key).view(B, S, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(value).view(B, S, self.kv_heads, self.head_dim).transpose(1, 2)
        return k, v

    def merge(self, out: torch.Tensor) -> torch.Tensor:
        """(B, H, L, E) → (B, L, D) through the output projection."""
        B, H, L, E = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(B, L, H * E))

    # conversion ------------------------------------------------------------------------------
    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention, **kwargs) -> "MultiHeadAttention":
        """Copy the weights of a ``torch.nn.MultiheadAttention`` (same outputs, fp32 ≤ 1e-5)."""
        return mha_from_torch(cls, mha, **kwargs)

    def to_torch(self) -> nn.MultiheadAttention:
        """A ``torch.nn.MultiheadAttention`` with the same weights (needs kv_heads == num_heads, the scaled-dot score and no sinks)."""
        if self.sinks is not None:
            raise ValueError("to_torch: torch's module has no attention sinks; build this module with sinks=False to convert it")
        return mha_to_torch(self)

    def extra_repr(self) -> str:
        sinks = ", sinks=True" if self.sinks is not None else ""
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, kv_heads={self.kv_heads}, score={self.score.name!r}, backend={self.backend!r}{sinks}"
