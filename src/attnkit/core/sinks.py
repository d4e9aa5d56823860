r"""Attention sinks: one extra logit per head in every row's softmax, with a zero value.

A learned sink gives each row somewhere to put attention it does not want to spend on any key
(a row may then attend to "nothing"). gpt-oss (OpenAI 2025, https://arxiv.org/abs/2508.10925)
learns one logit per head; StreamingLLM (Xiao et al. 2024, https://arxiv.org/abs/2309.17453)
proposes the learnable sink token this generalises ("softmax-off-by-one" is the sink fixed at 0).

Derivation
----------
For one row with scores :math:`s_j` (score · scale + bias, :math:`-\infty` where masked), values
:math:`v_j` and the sink logit :math:`\sigma` (whose value is the zero vector), with
:math:`Z = \sum_j e^{s_j} = e^{\mathrm{lse}}`:

.. math::

    o' = \frac{\sum_j e^{s_j} v_j}{Z + e^{\sigma}} = o \cdot \frac{Z}{Z + e^{\sigma}}
       = o \cdot \operatorname{sigmoid}(\mathrm{lse} - \sigma),
    \qquad \mathrm{lse}' = \log(Z + e^{\sigma}) = \operatorname{logaddexp}(\mathrm{lse}, \sigma),

and each weight scales by the same factor. Every exact backend returns ``out`` and ``lse``, so the
sink is applied once, here, after the backend ran (:func:`apply`). The gradients follow by the
chain rule through these two lines: :math:`\partial L / \partial \mathrm{lse}` flows back into the
backend (its lse must be differentiable: reference by autograd, blockwise through the
:math:`dS = P (dP - D + d\mathrm{lse})` term of its backward), and
:math:`\partial L / \partial \sigma` comes from the same two lines.

A fully masked row has :math:`\mathrm{lse} = -\infty`: the factor is
:math:`\operatorname{sigmoid}(-\infty) = 0`, so its output stays 0 (all of its attention goes to the
sink) and :math:`\mathrm{lse}' = \sigma`. No NaN, in the output or the gradients.

Shape legend: B batch, H query heads, L queries; ``sinks`` (H,) or (B|1, H, L|1).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["check_sinks", "apply"]

_SHAPES = "(H,) one logit per head, or (B|1, H, L|1) per sequence and/or query row"


def check_sinks(sinks: object, B: int, H: int, L: int, device: torch.device) -> torch.Tensor | None:
    """Validate the ``sinks=`` argument of :func:`attnkit.attention` and return it as (B|1, H, L|1)
    (a view: gradients reach the caller's tensor), or None.

    A floating tensor on q's device, shaped (H,) or (B|1, H, L|1), holding finite numbers (a
    sink of +inf would take every row's attention, -inf is no sink: leave the head out instead)."""
    if sinks is None:
        return None
    if not isinstance(sinks, torch.Tensor):
        raise TypeError(
            f"sinks must be a floating-point torch.Tensor {_SHAPES}, got {type(sinks).__name__}; "
            f"e.g. torch.zeros(H) or an nn.Parameter of shape (H,)"
        )
    if not sinks.is_floating_point():
        raise TypeError(f"sinks must be a floating-point tensor (one logit per head), got dtype {sinks.dtype}; cast it with sinks.float()")
    if sinks.device != device:
        raise ValueError(f"sinks must be on q's device {device}, got {sinks.device}; move them with sinks.to(q.device)")
    shape = tuple(sinks.shape)
    if sinks.dim() == 1 and shape == (H,):
        s = sinks.view(1, H, 1)
    elif sinks.dim() == 3 and shape[1] == H and shape[0] in (1, B) and shape[2] in (1, L):
        s = sinks
    else:
        raise ValueError(
            f"sinks must have shape {_SHAPES} = ({H},) or ({B}|1, {H}, {L}|1) for q of B={B}, H={H}, L={L}, "
            f"got {shape}; for per-head sinks pass a tensor of shape ({H},)"
        )
    if _values_readable(s) and not bool(torch.isfinite(s).all()):
        bad = s[~torch.isfinite(s)].flatten()[:3].tolist()
        raise ValueError(
            f"sinks must be finite numbers, got {bad}; a sink of +inf takes every row's attention and -inf is no "
            "sink at all: use a large finite logit, or leave sinks=None"
        )
    return s


def _values_readable(t: torch.Tensor) -> bool:
    """Can the finiteness check read ``t`` (not on meta, not while torch.compile traces, not under torch.func)?"""
    if t.device.type == "meta" or torch.compiler.is_compiling():
        return False
    return not torch._C._functorch.is_functorch_wrapped_tensor(t)


def apply(
    out: torch.Tensor, weights: torch.Tensor | None, lse: torch.Tensor, sinks: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """The sink softmax from the plain one: out (B, H, L, Ev), weights (B, H, L, S) or None and
    lse (B, H, L) of the backend, sinks (B|1, H, L|1) → (out', weights', lse').

    Computed in float64 (O(B·H·L·Ev), small beside the attention itself): the sink's gradient is a
    sum over rows of (dO · O) · keep · (1 - keep), terms of both signs, and in lse's float32 it was
    5-20 times the error of a float32 softmax over the scores and the sink as one more column
    (tests/core/test_trust_grads.py); out' and weights' come back in their own dtypes. Devices
    without float64 (MPS) keep lse's dtype."""
    work = torch.float64 if lse.device.type in ("cpu", "cuda") else lse.dtype
    sig = sinks.to(work)  # (B|1, H, L|1)
    # (B, H, L): Z / (Z + e^sink), 0 on fully masked rows; as exp(log sigmoid) so that its derivative
    # keep · sigmoid(sink - lse) is computed from e^-|x| (log_sigmoid's backward), not as
    # keep · (1 - keep): where the sink is far below lse, 1 - keep loses every digit
    keep = torch.exp(F.logsigmoid(lse.to(work) - sig))
    new_lse = torch.logaddexp(lse.to(work), sig).to(lse.dtype)  # (B, H, L): the sink joins the denominator
    out = (out.to(work) * keep.unsqueeze(-1)).to(out.dtype)  # (B, H, L, Ev)
    if weights is not None:
        weights = (weights.to(work) * keep.unsqueeze(-1)).to(weights.dtype)  # (B, H, L, S)
    return out, weights, new_lse
