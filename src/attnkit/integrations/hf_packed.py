"""Hugging Face padding-free batches through :func:`attnkit.core.varlen.varlen_attention`.

transformers trains without padding by packing a batch into one row (B = 1) of N sequences back to
back, in two spellings (https://huggingface.co/blog/packing-with-FA2):

* ``DataCollatorWithFlattening(return_flash_attn_kwargs=True)`` passes ``cu_seq_lens_q`` /
  ``cu_seq_lens_k`` (N + 1,) offsets down to every attention call (FlashAttention's varlen kwargs);
* ``position_ids`` that restart at every sequence (0 1 2 0 1 0 1 2 3); transformers' mask builder
  (``find_packed_sequence_indices``) then hands a block-diagonal causal (T, T) mask.

Either way each layer's attention call is routed to ``varlen_attention``: one batched call per group
of equal-length sequences, so the (T, T) scores between different sequences are never computed. The
per-sequence causal (and ``sliding_window``) mask is bottom-right aligned, as the model's own.

The restart of ``position_ids`` is trusted only when transformers also built the block-diagonal mask
(the first token of each sequence may not see the previous token): with a 2-D ``attention_mask`` the
model does not pack, and then neither does attnkit. Calls that ask for attention weights, carry a T5
``position_bias`` or per-row sinks keep the dense route (correct, with the mask transformers built).

Shape legend: T packed tokens, H query heads, Hkv key/value heads, E / Ev head dims; query (1, H, T, E).
"""

from __future__ import annotations

import torch
from torch import nn

from ..core import hooks
from ..core import masks as M
from ..core.varlen import varlen_attention


def _as_offsets(cu: object, device: torch.device) -> torch.Tensor:
    if not isinstance(cu, torch.Tensor):
        cu = torch.as_tensor(cu)
    return cu.to(device=device, dtype=torch.long).reshape(-1)


def _restart_offsets(position_ids: torch.Tensor) -> torch.Tensor | None:
    """(N + 1,) offsets of the sequences in a (1, T) row whose positions restart, or None (one sequence)."""
    pos = position_ids.reshape(-1)
    starts = torch.nonzero(pos[1:] - pos[:-1] != 1).flatten() + 1  # where the position does not continue
    if starts.numel() == 0:
        return None
    T = pos.shape[0]
    return torch.cat([starts.new_zeros(1), starts, starts.new_full((1,), T)])


def _mask_is_block_diagonal(attention_mask: torch.Tensor | None, cu: torch.Tensor) -> bool:
    """Did transformers build the packed mask? The first query of each sequence must see itself (a
    padding token does not) and must not see the key just before it (the last of the previous
    sequence), which a plain causal mask would allow."""
    if attention_mask is None or attention_mask.dtype != torch.bool or attention_mask.dim() != 4:
        return False
    first = cu[:-1]
    if not bool(attention_mask[:, :, first, first].all()):
        return False
    later = first[1:]
    return not bool(attention_mask[:, :, later, later - 1].any())


def packed_offsets(query: torch.Tensor, key: torch.Tensor, attention_mask, kwargs: dict) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(cu_seqlens_q, cu_seqlens_k)`` when this attention call is a padding-free batch, else None."""
    from . import hf_weights

    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    given = cu_q is not None or cu_k is not None
    if not given and kwargs.get("position_ids") is None:
        return None
    if hf_weights.wants_weights(kwargs) or kwargs.get("position_bias") is not None:
        return None  # weights of a packed row, or a dense T5 bias: the dense route handles them
    sink = kwargs.get("s_aux") if kwargs.get("s_aux") is not None else kwargs.get("sinks")
    if sink is not None and sink.dim() != 1:
        return None  # per-row sinks are laid out for the (B, H, L) batch
    if given:
        if query.shape[0] != 1:
            raise ValueError(
                f"cu_seq_lens_q/cu_seq_lens_k describe a packed batch of one row (B=1), got B={query.shape[0]}; "
                "flatten the batch with DataCollatorWithFlattening or drop the cu_seq_lens kwargs"
            )
        cu_q = _as_offsets(cu_q if cu_q is not None else cu_k, query.device)
        cu_k = _as_offsets(cu_k if cu_k is not None else cu_q, query.device)
        return cu_q, cu_k
    pos = kwargs["position_ids"]
    L, S = query.shape[2], key.shape[2]
    if query.shape[0] != 1 or L != S or not isinstance(pos, torch.Tensor) or pos.numel() != L:
        return None  # several rows, a cache (S > L), or positions of another shape: not a packed row
    cu = _restart_offsets(pos.to(query.device))
    if cu is None or not _mask_is_block_diagonal(attention_mask, cu):
        return None
    return cu, cu


def packed_forward(
    module: nn.Module, query, key, value, offsets, *, scaling, dropout, causal: bool, kwargs: dict, backend: str,
) -> tuple[torch.Tensor, None]:
    """One attention call of a packed row: query (1, H, T, E) → ((1, T, H, Ev), None)."""
    from .hf import _softcap_mod, _window_mask  # the dense route's conversions, shared (hf imports this module)

    cu_q, cu_k = offsets
    window = kwargs.get("sliding_window")
    mask = _window_mask(window, causal) if window is not None else (M.causal("bottom_right") if causal else None)
    softcap = kwargs.get("softcap")
    bias = _softcap_mod(float(softcap)) if softcap is not None else None
    sink = kwargs.get("s_aux") if kwargs.get("s_aux") is not None else kwargs.get("sinks")
    with hooks.scope(module):
        res = varlen_attention(
            query[0].transpose(0, 1), key[0].transpose(0, 1), value[0].transpose(0, 1),  # (T, H, E), (T, Hkv, E|Ev)
            cu_q, cu_k, mask=mask, bias=bias, scale=scaling, dropout_p=dropout if module.training else 0.0,
            backend=backend, sinks=sink,
        )
    return res.out[None], None  # (1, T, H, Ev)

