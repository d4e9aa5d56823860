"""A softmax that turns a fully masked row into zeros instead of NaN.

The usual ``softmax(masked_fill(s, ~m, <minus a billion>))`` is wrong twice: that constant overflows in fp16, and a row
with every key masked becomes a uniform average of garbage (or NaN with -inf). Here masked scores
are -inf, the row max is replaced by 0 where it is -inf (so ``exp(-inf - 0) = 0``), and rows whose
sum is 0 divide by 1. Gradients stay finite because every masked entry reaches the output through
``exp`` of -inf, whose derivative is 0.

Shape legend: scores (..., S); ``allowed`` broadcastable to it, True = may attend.
"""

from __future__ import annotations

import torch

from . import online_softmax


def safe_softmax(scores: torch.Tensor, allowed: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(weights, lse)``; weights (..., S) rows sum to 1 or are all 0; lse (...) is -inf on
    fully masked rows."""
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    # the online softmax's single-tile case: guarded max (detached: the shift cancels), exp, sum
    m = online_softmax.guard(scores.amax(dim=-1, keepdim=True)).detach()
    e = torch.exp(scores - m)
    safe, lse = online_softmax.finish(m, e.sum(dim=-1, keepdim=True))
    return e / safe, lse.squeeze(-1)
