"""Packed (padding-free) input for :class:`~attnkit.modules.multihead.MultiHeadAttention`.

``mha(x, cu_seqlens=cu)`` takes N sequences concatenated on one token axis, x (T, D), with
``cu_seqlens`` (N + 1,) = (0, L_0, L_0 + L_1, ..., T), FlashAttention's varlen layout. The
projections run over the T real tokens only (no padding), and attention runs per sequence through
:func:`attnkit.core.varlen.varlen_attention`: no query attends a key of another sequence, masks
(``causal``, ``mask``) align bottom-right per sequence, and positions restart at 0 in every
sequence, for the ``rotary`` embedding (Su et al. 2021, https://arxiv.org/abs/2104.09864) as for
position biases (ALiBi, T5). The result equals running each sequence alone as a (1, L_i, D) batch.

Cross-attention: ``mha(x, key=mem, cu_seqlens=cu_q, cu_seqlens_k=cu_k)`` with mem (S_total, Dk).

Padding masks, a KV cache and explicit ``positions`` have no meaning here (cu_seqlens says where each
sequence ends and where its positions start) and are refused with the fix in the message.

Shape legend: T packed query tokens, T_k packed key tokens, D model width, H query heads, Hkv key/value
heads, E head dim; x (T, D) → out (T, D).
"""

from __future__ import annotations

import torch

from ..core import masks as M
from ..core.checks import require_ndim, require_tensor
from ..core.output import AttentionOutput
from ..core.varlen import varlen_attention
from ..core.varlen_layout import check_cu_seqlens, positions_in_sequence


def refuse_padded_arguments(**given) -> None:
    """Arguments of the padded route that a packed call cannot take."""
    fixes = {
        "key_padding_mask": "a packed batch has no padding; leave the pad tokens out and describe the lengths in cu_seqlens",
        "attention_mask": "a packed batch has no padding; leave the pad tokens out and describe the lengths in cu_seqlens",
        "cache": "decode padded (B, L, D) batches with a cache; packed input is for training and prefill",
        "positions": "positions restart at 0 in every packed sequence (taken from cu_seqlens)",
        "need_weights": "per-sequence weights have different shapes; run a sequence alone as (1, L, D) to see its weights",
    }
    for name, value in given.items():
        if value is not None and value is not False:
            raise ValueError(f"{name} cannot be combined with cu_seqlens (packed input): {fixes[name]}")


def attend_packed(mha, query, key, value, *, cu_seqlens, cu_seqlens_k, mask, causal, bias, rotary) -> tuple[torch.Tensor, AttentionOutput]:
    """query (T, D), key / value (T_k, Dk|Dv) or None → (out (T, D), the varlen :class:`AttentionOutput`)."""
    self_attention = key is None or key is query
    key = query if key is None else key
    value = key if value is None else value
    for name, t, d in (("query", query, mha.embed_dim), ("key", key, mha.kdim), ("value", value, mha.vdim)):
        require_tensor(name, t)
        require_ndim(name, t, 2, "(T, D)", "packed input has no batch axis: concatenate the sequences along dim 0 and pass cu_seqlens")
        if t.shape[-1] != d:
            raise ValueError(f"{name} last dim must be {d}, got shape {tuple(t.shape)}")
        if t.dtype != mha.q_proj.weight.dtype and not torch.is_autocast_enabled(t.device.type):
            raise TypeError(f"{name} has dtype {t.dtype} but the module's weights are {mha.q_proj.weight.dtype}; cast the input or the module with .to(dtype)")
    if key.shape[0] != value.shape[0]:
        raise ValueError(f"key and value must have the same number of packed tokens, got {tuple(key.shape)} and {tuple(value.shape)}")
    if self_attention and cu_seqlens_k is not None:
        raise ValueError("cu_seqlens_k is for cross-attention (key= given); self-attention uses cu_seqlens for queries and keys")
    if not self_attention and cu_seqlens_k is None:
        raise ValueError("packed cross-attention needs cu_seqlens_k: where each key sequence of key= starts and ends")
    cu_q = check_cu_seqlens("cu_seqlens", cu_seqlens, query.shape[0], "query.shape[0]")
    T, Tk = query.shape[0], key.shape[0]
    q = mha.q_proj(query).view(T, mha.num_heads, mha.head_dim)  # (T, H, E)
    k = mha.k_proj(key).view(Tk, mha.kv_heads, mha.head_dim)  # (T_k, Hkv, E)
    v = mha.v_proj(value).view(Tk, mha.kv_heads, mha.head_dim)
    if rotary is not None:
        if not self_attention:
            raise ValueError("rotary embedding is for self-attention (key=None); cross-attention keys have no shared positions")
        pos = positions_in_sequence(cu_q, q.device)  # (T,): 0..L_i-1 in every sequence
        # the rotation reads (B, H, L, E): view the packed rows as one long sequence at restarting positions
        q, k = (rotary(x.transpose(0, 1)[None], pos)[0].transpose(0, 1) for x in (q, k))
    parts = [M.as_mask(mask)] if mask is not None else []
    if causal:
        parts.append(M.causal("bottom_right"))
    combined = None
    for p in parts:
        combined = p if combined is None else combined & p
    res = varlen_attention(
        q, k, v, cu_seqlens, cu_seqlens_k, score=mha.score, mask=combined, bias=bias,
        dropout_p=mha.dropout if mha.training else 0.0, backend=mha.backend, sinks=mha.sinks,
    )
    out = mha.out_proj(res.out.reshape(T, mha.num_heads * mha.head_dim))  # (T, H, E) → (T, D)
    return out, res
