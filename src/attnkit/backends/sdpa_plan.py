"""The sdpa backend's plans: what :func:`attnkit.backends.sdpa.run` decides from a call's signature
alone, kept per signature (``AttentionCall.signature``, :mod:`attnkit.core.call_cache`).

A plan serves a plain call on CPU's fused op (no bias or sinks, the dot score, inputs in the work
dtype and laid out as the op reads them, no GQA): the prepared mask, its additive form and the
layout decisions are taken once, and each call pays only the NaN/inf check (merged with the dead
keys' bound when the mask has dead keys), the kernel and the empty rows' fills. Which calls get a
plan is the backend's decision (its ``make`` function); this module keeps and runs them.

Shapes: q (B, H, L, E), k and v (B, H, S, E); the additive mask (B|1, H, L, S).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

import torch

from ..core.call import AttentionCall
from ..core.output import BackendResult
from . import nonfinite_result, sdpa_flash, sdpa_mask_cache
from .nonfinite import inputs_finite, needs_exact, run_exact, squares_if_finite

__all__ = ["Plan", "plan_of", "run_planned", "clear_plans", "PLAN_ENTRIES"]


@dataclass(frozen=True)
class Plan:
    """What :func:`run` decides from a call's signature alone (``AttentionCall.signature``,
    :mod:`attnkit.core.call_cache`) for a plain call on CPU's fused op: no bias or sinks, the dot
    score, inputs in the work dtype and laid out as the op reads them, no GQA. ``prep`` is the
    prepared mask (None for no mask or ``is_causal``), ``attn_mask`` the op's additive (B|1, H, L, S)
    form, ``squares`` whether dead keys exist, so each call proves them inert (or zeroes them)."""

    is_causal: bool
    prep: sdpa_mask_cache.Prepared | None
    attn_mask: torch.Tensor | None
    squares: bool
    mats: tuple


_FLASH_OP = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)  # (out, lse); _fused checks it exists
# plans kept; each holds its prepared mask (at most sdpa_mask_cache.MAX_ELEMENTS elements, bool and
# float32 forms), so plans keep at most as much alive as sdpa_mask_cache's own MAX_ENTRIES do
PLAN_ENTRIES = 8
_PLANS: dict[int, Plan | None] = {}  # by AttentionCall.signature, in insertion order
_MISSING = object()
_PLANS_LOCK = threading.Lock()


def plan_of(call: AttentionCall, make: Callable[[AttentionCall], "Plan | None"]) -> Plan | None:
    """The call's plan: kept per signature (``make(call)`` on its first call); None when the call
    takes the general path."""
    key = call.signature
    if key is None:
        return None
    plan = _PLANS.get(key, _MISSING)  # one dict read, atomic: no lock on the hit path
    if plan is not _MISSING:
        return plan
    plan = make(call)
    with _PLANS_LOCK:
        _PLANS[key] = plan
        while len(_PLANS) > PLAN_ENTRIES:
            _PLANS.pop(next(iter(_PLANS)))  # the oldest first
    return plan


def run_planned(call: AttentionCall, plan: Plan) -> BackendResult:
    """The backend's run for a planned call: the NaN/inf check (merged with the dead keys' bound when the
    mask has dead keys), the kernel and the empty rows' fills; every decision that depends only on
    the signature was taken once."""
    q, k, v = call.q, call.k, call.v
    prep = plan.prep
    direct = not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad))
    if direct and (prep is None or prep.empty_rows is None) and _result_check(call, plan):
        # the kernel first, its result checked (nonfinite_result); a suspicious one runs the steps below
        out, lse = _FLASH_OP(q, k, v, 0.0, plan.is_causal, attn_mask=plan.attn_mask, scale=call.scale)
        if not (nonfinite_result.lse_suspicious(lse) if plan.is_causal else nonfinite_result.result_suspicious(out, lse)):
            return BackendResult(out, None, lse, 0, list(plan.mats))
    zero_dead = False
    if plan.squares:
        sq = squares_if_finite(q, k, v)  # finite: every element is (no bias here), and the scores' bound
        if sq is None:
            if needs_exact(call):
                return run_exact(call)
            zero_dead = True
        else:
            zero_dead = not sdpa_mask_cache.squares_inert(call.scale, sq)
    elif not inputs_finite(q, k, v) and needs_exact(call):  # no bias here: q, k, v are all there is to check
        return run_exact(call)
    if zero_dead:
        k, v = k.masked_fill(prep.dead, 0.0), v.masked_fill(prep.dead, 0.0)
    empty_rows = None if prep is None else prep.empty_rows
    if empty_rows is not None:
        q = q.masked_fill(empty_rows.unsqueeze(-1), 0.0)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        out, lse = sdpa_flash.flash_attention_cpu(q, k, v, plan.attn_mask, plan.is_causal, call.scale, 1)
    else:  # nothing to differentiate: the op itself, without the wrapper's checks (E == Ev, no GQA here)
        out, lse = _FLASH_OP(q, k, v, 0.0, plan.is_causal, attn_mask=plan.attn_mask, scale=call.scale)
    fully_masked = 0
    if empty_rows is not None:
        out = out.masked_fill(empty_rows.unsqueeze(-1), 0.0)
        lse = lse.masked_fill(empty_rows, float("-inf"))
        fully_masked = empty_rows.expand(q.shape[0], q.shape[1], q.shape[2]).sum()
    return BackendResult(out, None, lse, fully_masked, list(plan.mats))


def _result_check(call: AttentionCall, plan: Plan) -> bool:
    """True when this call's NaN/inf check may read the kernel's result instead of q, k and v
    (:mod:`attnkit.backends.nonfinite_result`): the self-test passed for the dtype and causal mode,
    and with ``is_causal`` (whose kernel skips tiles; square calls only, as tested) v's own sum
    finite. Planned calls hold readable values (no plan under torch.compile or torch.func)."""
    q, v = call.q, call.v
    if not nonfinite_result.trusted(q.dtype, plan.is_causal):
        return False
    if plan.is_causal:
        return q.shape[2] == call.k.shape[2] and not nonfinite_result.v_suspicious(v)
    return True


def clear_plans() -> None:
    """Drop every kept plan (tests)."""
    with _PLANS_LOCK:
        _PLANS.clear()
