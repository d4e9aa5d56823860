r"""The online softmax, once: running max and sum with the -inf guard, and the log-sum-exp merge.

Milakov & Gimelshein 2018, https://arxiv.org/abs/1805.02867; used tile by tile in
FlashAttention (Dao et al. 2022, https://arxiv.org/abs/2205.14135). Users: the blockwise
backend (:mod:`attnkit.backends.blockwise`, base 2), ring attention's block math
(:mod:`attnkit.distributed.block`), the streamed row summaries
(:mod:`attnkit.inspect.row_summary`) and :func:`attnkit.core.softmax.safe_softmax`.

For one row with scores :math:`s_j` (:math:`-\infty` where masked), after a tile :math:`T`:

* :math:`m' = \max(m, \max_{j \in T} s_j)`, the running max;
* :math:`p_j = e^{s_j - m'}` and :math:`\alpha = e^{m - m'}`, which rescales every earlier partial
  sum (:math:`\ell`, the unnormalised output, …) to the new reference max;
* at the end :math:`\mathrm{lse} = m + \log \ell`.

The -inf guard: a row that has seen only masked keys has :math:`m' = -\infty`, and
:math:`e^{-\infty - (-\infty)}` is NaN. The max is replaced by 0 there (:func:`guard`), so every
:math:`p_j` and :math:`\alpha` is :math:`e^{-\infty} = 0`: the row keeps :math:`\ell = 0`, its output
is 0 (divide by 1) and its lse is :math:`-\infty`. Never NaN.

Two partial results over disjoint key sets merge by log-sum-exp (:func:`merge`):
:math:`\mathrm{lse} = \log(e^{\mathrm{lse}_1} + e^{\mathrm{lse}_2})`,
:math:`o = e^{\mathrm{lse}_1 - \mathrm{lse}} o_1 + e^{\mathrm{lse}_2 - \mathrm{lse}} o_2`.

``base2=True`` works in base 2 (scores already multiplied by :math:`\log_2 e`, ``exp2``/``log2``):
on CPU fp32 ``exp`` has a 10–30× slow path below −87 that ``exp2`` does not.

Shape legend: s (..., n) one tile's scores of a row batch; m, ell, lse (..., 1) with ``keepdim``
(or (...) where noted); o (..., Ev).
"""

from __future__ import annotations

import torch

__all__ = ["guard", "step", "finish", "merge"]

_INF = float("inf")


def guard(m: torch.Tensor) -> torch.Tensor:
    """The -inf guard: ``m`` with -inf replaced by 0, so ``exp(-inf - guard(m))`` is 0, not NaN."""
    return torch.where(torch.isneginf(m), 0.0, m)


def step(
    m: torch.Tensor, s: torch.Tensor, *, base2: bool = False, inplace: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fold one tile of scores s (..., n) into the running max m (..., 1).

    Returns ``(m_new, m_use, p, alpha)``: the new running max (..., 1) (-inf on rows with nothing
    allowed yet), its guarded form used as the shift, ``p = exp(s - m_use)`` (..., n) and
    ``alpha = exp(m - m_use)`` (..., 1), the factor that rescales earlier partial sums.
    ``inplace`` reuses s's storage for p (the scores are then gone)."""
    m_new = torch.maximum(m, s.amax(-1, keepdim=True))
    m_use = guard(m_new)
    if inplace:
        p = s.sub_(m_use)
        if p.dtype == torch.float32:
            # exponents below float32's normal range give denormal p, which x86 computes and sums at a
            # fraction of the speed (ALiBi's far keys: 2.5x slower tiles); they are < 2^-126 of the row's
            # largest term and vanish in its sum anyway, so make them exact zeros. threshold_ is one
            # in-place pass (x <= t -> -inf; NaN kept): masked_fill_(p < t) cost dense tiles +40%
            torch.nn.functional.threshold_(p, -126.0 if base2 else -87.3, -_INF)
        p = p.exp2_() if base2 else p.exp_()
        alpha = (m - m_use).exp2_() if base2 else (m - m_use).exp_()
    else:
        exp = torch.exp2 if base2 else torch.exp
        p, alpha = exp(s - m_use), exp(m - m_use)
    return m_new, m_use, p, alpha


def finish(m: torch.Tensor, ell: torch.Tensor, *, base2: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``(safe, lse)`` from the final running max m and sum ell: ``safe`` is ell with 0 replaced by 1
    (divide the unnormalised output by it: empty rows stay 0) and ``lse = m + log ell``, -inf on
    rows with nothing allowed. Any m works where ell > 0 (guarded or not)."""
    nonempty = ell != 0  # not `> 0`: a NaN sum is a NaN row (lse NaN), not an empty one
    safe = torch.where(nonempty, ell, 1.0)
    log = torch.log2 if base2 else torch.log
    lse = torch.where(nonempty, guard(m) + log(safe), -_INF)
    return safe, lse


def merge(
    o1: torch.Tensor, lse1: torch.Tensor, o2: torch.Tensor, lse2: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge two normalised partial results over disjoint keys by log-sum-exp.

    o1, o2 (..., Ev); lse1, lse2 (...) natural log. Rows where both lse are -inf stay (0, -inf)."""
    m = guard(torch.maximum(lse1, lse2))
    w1, w2 = torch.exp(lse1 - m), torch.exp(lse2 - m)  # 0 for an empty part
    safe, lse = finish(m, w1 + w2)
    return (w1 / safe).unsqueeze(-1) * o1 + (w2 / safe).unsqueeze(-1) * o2, lse
