r"""Partial results of the fused kernel: empty rows and the log-sum-exp merge.

The fused kernel (:mod:`.fused_gate`) returns ``(out, lse)`` per call. Two conventions differ from
attnkit's and are fixed here:

* a query row with no allowed key comes back with out 0 and lse 0; attnkit's lse is
  :math:`-\infty` there (:func:`empty_rows_to_neginf`), and the backward op must be given a finite
  lse for such rows (:func:`lse_for_backward`: with out 0 their gradients are 0 anyway);
* a row whose keys are split over two calls (a cached prefix and a causal square) is merged by
  log-sum-exp, written into the first part's storage (:func:`merge_into`):
  :math:`\mathrm{lse} = \log(e^{\mathrm{lse}_1} + e^{\mathrm{lse}_2})`,
  :math:`o = e^{\mathrm{lse}_1 - \mathrm{lse}} o_1 + e^{\mathrm{lse}_2 - \mathrm{lse}} o_2`, in
  float32 (float64 for float64 inputs) whatever the input dtype.

Shape legend: out (..., l, Ev); lse (..., l); allowed_rows (..., l) bool.
"""

from __future__ import annotations

import torch

__all__ = ["empty_rows_to_neginf", "lse_for_backward", "merge_into"]

_NEG_INF = float("-inf")


def empty_rows_to_neginf(out: torch.Tensor, lse: torch.Tensor, allowed_rows: torch.Tensor) -> None:
    """In place: rows with no allowed key get out 0 and lse -inf (the kernel gives out 0, lse 0)."""
    empty = ~allowed_rows
    lse.masked_fill_(empty, _NEG_INF)
    out.masked_fill_(empty.unsqueeze(-1), 0.0)


def lse_for_backward(lse: torch.Tensor) -> torch.Tensor:
    """The lse to hand the backward op: -inf (fully masked rows) becomes 0, as the kernel itself
    returns there; their out is 0, so every gradient they contribute is 0. Other values unchanged."""
    return torch.where(torch.isneginf(lse), 0.0, lse)


def merge_into(o1: torch.Tensor, lse1: torch.Tensor, o2: torch.Tensor, lse2: torch.Tensor) -> None:
    """Merge part 2 into part 1 in place (o1, lse1 hold the result). Parts with lse -inf weigh 0;
    rows where both are -inf stay (0, -inf). NaN in either part propagates."""
    work = lse1.dtype
    m = torch.maximum(lse1, lse2)
    m = torch.where(torch.isneginf(m), 0.0, m)
    w1, w2 = torch.exp(lse1 - m), torch.exp(lse2 - m)  # (..., l); 0 for an empty part
    total = w1 + w2
    nonempty = total != 0
    safe = torch.where(nonempty, total, 1.0)
    merged = (w1 / safe).unsqueeze(-1) * o1.to(work) + (w2 / safe).unsqueeze(-1) * o2.to(work)
    o1.copy_(merged)
    lse1.copy_(torch.where(nonempty, m + torch.log(safe), _NEG_INF))
