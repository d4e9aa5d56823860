r"""The online softmax, once: running max and sum with the -inf guard, and the log-sum-exp merge.

Milakov & Gimelshein 2018, https://arxiv.org/abs/1805.02867; used tile by tile in
FlashAttention (Dao et al. 2022, https://arxiv.org/abs/2205.14135). Users: the blockwise
backend (:mod:`attnkit.backends.blockwise`, through :func:`exp_`), ring attention's block math
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

Scores, max and lse are in natural units (with ``scale``, scores and max in units of 1/scale, see
:func:`step`). ``exp2=True`` computes each exponential as :math:`2^{(s - m) \log_2 e}` (:func:`exp_`):
on CPU fp32 ``exp`` has a 10–30× slow path below −87 (and at −inf, every masked score) that ``exp2``
does not. The shift comes first and the conversion to base 2 second, so the conversion's rounding
is relative to :math:`|s - m|` (0 for the row's largest score), as in ``exp(s - m)``. Scaling the
scores by :math:`\log_2 e` before the shift would round them relative to :math:`|s|`: a weight off
by ~:math:`|s| \cdot 6 \cdot 10^{-8}` relative, 4e-5 at logits of ~700, many times the error of
the plain float32 softmax (``tests/core/test_online_softmax.py`` measures both).

Shape legend: s (..., n) one tile's scores of a row batch; m, ell, lse (..., 1) with ``keepdim``
(or (...) where noted); o (..., Ev).
"""

from __future__ import annotations

import torch

__all__ = ["guard", "step", "finish", "merge", "exp_"]

_INF = float("inf")
_LOG2E = 1.4426950408889634


def guard(m: torch.Tensor) -> torch.Tensor:
    """The -inf guard: ``m`` with -inf replaced by 0, so ``exp(-inf - guard(m))`` is 0, not NaN."""
    return torch.where(torch.isneginf(m), 0.0, m)


def exp_(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    r"""In place :math:`e^{\mathrm{scale} \cdot x}` computed as :math:`2^{x \cdot \mathrm{scale} \log_2 e}`
    (x ≤ 0, already shifted by the row max: the conversion then rounds relative to |x|). In float32, exponents below float32's normal
    range (:math:`2^{-126}`) give denormal results, which x86 computes and sums at a fraction of the
    speed (ALiBi's far keys: 2.5× slower tiles); they are :math:`< 2^{-126}` of the row's largest term
    and vanish in its sum anyway, so they become exact zeros. ``threshold_`` is one in-place pass
    (x ≤ t → -inf; NaN kept): ``masked_fill_(x < t)`` cost dense tiles +40%."""
    x = x.mul_(scale * _LOG2E)
    if x.dtype == torch.float32:
        torch.nn.functional.threshold_(x, -126.0, -_INF)
    return x.exp2_()


def step(
    m: torch.Tensor, s: torch.Tensor, *, exp2: bool = False, inplace: bool = False, scale: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fold one tile of scores s (..., n) into the running max m (..., 1).

    Returns ``(m_new, m_use, p, alpha)``: the new running max (..., 1) (-inf on rows with nothing
    allowed yet), its guarded form used as the shift, ``p = exp(s - m_use)`` (..., n) and
    ``alpha = exp(m - m_use)`` (..., 1), the factor that rescales earlier partial sums.
    ``inplace`` reuses s's storage for p (the scores are then gone); ``exp2`` computes the
    exponentials with :func:`exp_` (in place only), which also takes ``scale`` > 0: scores in units
    of 1/scale (``p = exp(scale · (s - m_use))``; the max commutes with a positive scale)."""
    if scale != 1.0 and not (inplace and exp2):
        raise ValueError(f"scale={scale} needs inplace=True and exp2=True; pass scores in natural units otherwise")
    m_new = torch.maximum(m, s.amax(-1, keepdim=True))
    m_use = guard(m_new)
    if inplace and exp2:
        return m_new, m_use, exp_(s.sub_(m_use), scale), exp_(m - m_use, scale)
    if inplace:
        p = s.sub_(m_use)
        if p.dtype == torch.float32:
            # as in exp_: results below float32's normal range become exact zeros
            torch.nn.functional.threshold_(p, -87.3, -_INF)
        return m_new, m_use, p.exp_(), (m - m_use).exp_()
    return m_new, m_use, torch.exp(s - m_use), torch.exp(m - m_use)


def finish(m: torch.Tensor, ell: torch.Tensor, *, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(safe, lse)`` from the final running max m and sum ell: ``safe`` is ell with 0 replaced by 1
    (divide the unnormalised output by it: empty rows stay 0) and ``lse = scale · m + log ell``
    (``scale`` as in :func:`step`), -inf on rows with nothing allowed. Any m works where ell > 0
    (guarded or not)."""
    nonempty = ell != 0  # not `> 0`: a NaN sum is a NaN row (lse NaN), not an empty one
    safe = torch.where(nonempty, ell, 1.0)
    lse = torch.where(nonempty, guard(m) * scale + torch.log(safe), -_INF)
    return safe, lse


def merge(
    o1: torch.Tensor, lse1: torch.Tensor, o2: torch.Tensor, lse2: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge two normalised partial results over disjoint keys by log-sum-exp.

    o1, o2 (..., Ev); lse1, lse2 (...) natural log. Rows where both lse are -inf stay (0, -inf).
    The weights are formed in the lse's dtype (float64 for a float32 ring: distributed.block) and
    applied in the outputs', so no output-sized temporary is wider than the outputs."""
    m = guard(torch.maximum(lse1, lse2))
    w1, w2 = torch.exp(lse1 - m), torch.exp(lse2 - m)  # 0 for an empty part
    safe, lse = finish(m, w1 + w2)
    a, b = (w1 / safe).to(o1.dtype), (w2 / safe).to(o2.dtype)
    return a.unsqueeze(-1) * o1 + b.unsqueeze(-1) * o2, lse
