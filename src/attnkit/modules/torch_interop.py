"""Weight conversion between :class:`~attnkit.modules.multihead.MultiHeadAttention` and
``torch.nn.MultiheadAttention``.

PyTorch packs the query/key/value projections into one ``in_proj_weight`` (3D, D) when
``kdim == vdim == embed_dim`` and keeps three separate ``{q,k,v}_proj_weight`` otherwise; attnkit
always keeps three ``nn.Linear`` layers. These functions copy weights between the two layouts, so a
converted module gives the same outputs (fp32 ≤ 1e-5). They back
:meth:`MultiHeadAttention.from_torch` and :meth:`MultiHeadAttention.to_torch`, which are the entry
points users call; this file exists so the module file holds attention, not conversion.

Shape legend: D embed_dim, Dk kdim, Dv vdim; in_proj_weight (3D, D), q_proj_weight (D, D),
k_proj_weight (D, Dk), v_proj_weight (D, Dv), in_proj_bias (3D,), out_proj weight (D, D).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from .multihead import MultiHeadAttention

__all__ = ["mha_from_torch", "mha_to_torch"]


def mha_from_torch(cls: type[MultiHeadAttention], mha: nn.MultiheadAttention, **kwargs) -> MultiHeadAttention:
    """Build ``cls`` with the weights of a ``torch.nn.MultiheadAttention``; see :meth:`MultiHeadAttention.from_torch`."""
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


def mha_to_torch(module: MultiHeadAttention) -> nn.MultiheadAttention:
    """A ``torch.nn.MultiheadAttention`` with ``module``'s weights; see :meth:`MultiHeadAttention.to_torch`."""
    if module.kv_heads != module.num_heads:
        raise ValueError(f"to_torch: torch's module has no GQA; kv_heads={module.kv_heads} must equal num_heads={module.num_heads}")
    if module.score.name != "scaled_dot":
        raise ValueError(f"to_torch: torch's module computes only scaled dot scores, this one uses {module.score.name!r}")
    has_bias = module.q_proj.bias is not None
    w = module.q_proj.weight
    mha = nn.MultiheadAttention(
        module.embed_dim, module.num_heads, dropout=module.dropout, bias=has_bias, kdim=module.kdim, vdim=module.vdim,
        batch_first=module.batch_first, device=w.device, dtype=w.dtype,
    )
    with torch.no_grad():
        if mha._qkv_same_embed_dim:
            mha.in_proj_weight.copy_(torch.cat([module.q_proj.weight, module.k_proj.weight, module.v_proj.weight]))
        else:
            mha.q_proj_weight.copy_(module.q_proj.weight)
            mha.k_proj_weight.copy_(module.k_proj.weight)
            mha.v_proj_weight.copy_(module.v_proj.weight)
        if has_bias:
            mha.in_proj_bias.copy_(torch.cat([module.q_proj.bias, module.k_proj.bias, module.v_proj.bias]))
            mha.out_proj.bias.copy_(module.out_proj.bias)
        mha.out_proj.weight.copy_(module.out_proj.weight)
    return mha
