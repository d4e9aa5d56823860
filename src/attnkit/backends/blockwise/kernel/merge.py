r"""Partial results of the fused kernel: empty rows and the log-sum-exp merge.

The fused kernel (:mod:`.gate`) returns ``(out, lse)`` per call. Two conventions differ from
attnkit's and are fixed here:

* a query row with no allowed key comes back with out 0 and lse 0; attnkit's lse is
  :math:`-\infty` there (:func:`empty_rows_to_neginf`), and the backward op must be given a finite
  lse for such rows (:func:`lse_for_backward`: with out 0 their gradients are 0 anyway);
* a row whose keys are split over two calls (a cached prefix and a causal square) is merged by
  log-sum-exp, written into the first part's storage (:func:`merge_into`):
  :math:`\mathrm{lse} = \log(e^{\mathrm{lse}_1} + e^{\mathrm{lse}_2})`,
  :math:`o = e^{\mathrm{lse}_1 - \mathrm{lse}} o_1 + e^{\mathrm{lse}_2 - \mathrm{lse}} o_2`, in
  float32 (float64 for float64 inputs) whatever the input dtype.

The kernel returns a float32 lse rounded to an ulp of itself: 3e-5 at |lse| ~ 350. Where the parts
weigh alike, that rounding moves their relative weights by as much, an error of the output that
the reference (one softmax over the row) does not have: 11-14x the float32 reference's own error
at |lse| ~ 350 with exactly representable scores. So parts whose lse exceeds :data:`SHIFT_ABOVE`
in magnitude and lie within :data:`COMPARABLE_WITHIN` of each other are recomputed relative to a
row shift (:func:`rows_to_shift`), their lse then small and exact to a few ulps of itself; a part
far below the other reaches the output only through its tiny weight, and the dominant one's
rounding cancels in its own normalisation.

Shape legend: out (..., l, Ev); lse (..., l); allowed_rows (..., l) bool.
"""

from __future__ import annotations

import torch

__all__ = ["empty_rows_to_neginf", "lse_for_backward", "merge_into", "rows_to_shift", "SHIFT_ABOVE", "COMPARABLE_WITHIN"]

_NEG_INF = float("-inf")
# a float32 lse up to 16 in magnitude is rounded by at most 2^-21, so two parts' relative weight by
# 2^-20 (8 ulps, half the fuzz's floor); at 32 the custom route's 5-key-chunk fuzz still failed 3 of
# 3,972 cases (out, dq up to 1.5x). Parts more than 24 apart weigh e^-24 ~ 4e-11 against each other
SHIFT_ABOVE = 16.0
COMPARABLE_WITHIN = 24.0


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


def rows_to_shift(lse1: torch.Tensor, lse2: torch.Tensor | None = None) -> torch.Tensor | None:
    """The row shifts (..., 1) to recompute float32 parts with, or None when no row needs one.

    Two parts: their larger lse, when some finite pair lies above :data:`SHIFT_ABOVE` in magnitude
    within :data:`COMPARABLE_WITHIN` of each other. One part (a first call, whose lse the others
    will be computed relative to): its lse, when some finite value lies above SHIFT_ABOVE. Rows that
    are not finite get 0, so NaN and inf rows keep their own values. lse1, lse2 (...)."""
    if lse1.dtype != torch.float32:
        return None
    finite = torch.isfinite(lse1) if lse2 is None else torch.isfinite(lse1) & torch.isfinite(lse2)
    top = lse1 if lse2 is None else torch.maximum(lse1, lse2)
    size = lse1.abs() if lse2 is None else torch.maximum(lse1.abs(), lse2.abs())
    need = finite & (size > SHIFT_ABOVE)
    if lse2 is not None:
        need &= (lse1 - lse2).abs() < COMPARABLE_WITHIN
    if not bool(need.any()):
        return None
    return torch.where(finite, top, 0.0).unsqueeze(-1)
