"""What every "query over memory" module returns: the context and the attention weights.

Bahdanau and Luong attention (:mod:`.seq2seq_attention`: a decoder state over the encoder's outputs)
and temporal attention (:mod:`.temporal_attention`: forecast steps over past states) compute the same
thing, one head of ``softmax(score(q, k)) @ memory``, and hand back the same pair:

    out = attention_module(query, memory)        # query (B, T, D) or one step (B, D)
    out.context      # (B, T, Dm) or (B, Dm): the weighted sum of the memory rows
    out.weights      # (B, T, S) or (B, S): each row sums to 1 over the valid memory rows
    context, weights = out                       # it is a tuple, so unpacking works as before

(:class:`~attnkit.modules.MultiHeadAttention` keeps ``torch.nn.MultiheadAttention``'s ``(out, weights)``
pair, whose weights carry a head axis.)
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class MemoryAttentionOutput(NamedTuple):
    context: torch.Tensor  # (B, T, Dm), or (B, Dm) for a one-step query
    weights: torch.Tensor  # (B, T, S), or (B, S): rows sum to 1 over the valid memory rows


__all__ = ["MemoryAttentionOutput"]
