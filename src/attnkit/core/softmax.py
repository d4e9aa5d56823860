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


def safe_softmax(scores: torch.Tensor, allowed: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(weights, lse)``; weights (..., S) rows sum to 1 or are all 0; lse (...) is -inf on
    fully masked rows."""
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    m = scores.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m)).detach()
    e = torch.exp(scores - m)
    s = e.sum(dim=-1, keepdim=True)
    nonempty = s > 0
    weights = e / torch.where(nonempty, s, torch.ones_like(s))
    lse = torch.where(nonempty, m + torch.log(torch.where(nonempty, s, torch.ones_like(s))), torch.full_like(s, float("-inf")))
    return weights, lse.squeeze(-1)
