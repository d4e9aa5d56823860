"""The planned sdpa path checks the kernel's result for NaN/inf (attnkit.backends.nonfinite_result):
every placement gives the float64 reference's NaN pattern and values, the self-test's fallback keeps
the input sums, and the self-test catches a check that is too weak.

Shape legend: B batch, H heads, n = L = S, E head dim.
"""

from __future__ import annotations

import pytest
import torch

import attnkit
from attnkit import masks as M
from attnkit.backends import nonfinite_result, sdpa_plan

VALUES = (float("nan"), float("inf"), float("-inf"))
H, E = 2, 16


def _mask(kind: str, B: int, n: int):
    if kind == "causal":
        return M.causal()
    if kind == "window":
        return M.sliding_window(16, 0)
    if kind == "padding":  # every other sequence loses its last quarter of keys
        return M.padding_mask([n if b % 2 else n - n // 4 for b in range(B)], n)
    return M.document(torch.arange(n).mul(4).div(n, rounding_mode="floor").expand(B, n).contiguous())


def _check(q, k, v, mask):
    """The planned path (sdpa, no grad) against the reference in float64: same non-finite pattern,
    finite values within a bound set by the reference's own float32 error."""
    with torch.no_grad():
        got = attnkit.attention(q, k, v, mask=mask, backend="sdpa").out
        ref64 = attnkit.attention(q.double(), k.double(), v.double(), mask=mask, backend="reference").out
        ref32 = attnkit.attention(q, k, v, mask=mask, backend="reference").out
    fin = torch.isfinite(ref64)
    assert torch.equal(torch.isfinite(got), fin)
    assert torch.equal(torch.isnan(got), torch.isnan(ref64))
    err32 = (ref32.double() - ref64)[fin].abs().max().item() if fin.any() else 0.0
    if fin.any():
        assert (got.double() - ref64)[fin].abs().max().item() <= 4 * err32 + 1e-6


CASES = [(kind, B, n) for kind in ("causal", "window", "padding", "document") for B, n in ((1, 64), (8, 64), (1, 128), (1, 512))]


@pytest.mark.parametrize("kind,B,n", CASES)
def test_every_placement_matches_reference(kind, B, n, monkeypatch):
    sdpa_plan.clear_plans()
    checks = []
    real = nonfinite_result.result_suspicious
    monkeypatch.setattr(nonfinite_result, "result_suspicious", lambda o, l: checks.append(1) or real(o, l))
    real_lse = nonfinite_result.lse_suspicious
    monkeypatch.setattr(nonfinite_result, "lse_suspicious", lambda l: checks.append(1) or real_lse(l))
    g = torch.Generator().manual_seed(n + B)
    base = [torch.randn(B, H, n, E, generator=g) for _ in range(3)]
    mask = _mask(kind, B, n)
    _check(*base, mask)
    assert checks, "the planned call did not use the result check"
    for which in range(3):
        for row in (0, n // 2 + 1, n - 1):
            for val in VALUES:
                ts = [t.clone() for t in base]
                ts[which][B - 1, 1, row, 5] = val
                _check(*ts, mask)


def test_fallback_when_self_test_fails(monkeypatch):
    monkeypatch.setattr(nonfinite_result, "_self_test", lambda dtype, is_causal: False)
    nonfinite_result.reset()
    sdpa_plan.clear_plans()
    calls = []
    monkeypatch.setattr(nonfinite_result, "result_suspicious", lambda o, l: calls.append(1) or True)
    monkeypatch.setattr(nonfinite_result, "lse_suspicious", lambda l: calls.append(1) or True)
    try:
        g = torch.Generator().manual_seed(1)
        base = [torch.randn(2, H, 64, E, generator=g) for _ in range(3)]
        for kind in ("causal", "window", "padding"):
            for which in range(3):
                for val in VALUES:
                    ts = [t.clone() for t in base]
                    ts[which][1, 0, 7, 2] = val
                    _check(*ts, _mask(kind, 2, 64))
        assert not calls  # the input sums ran, never the result check
        assert not nonfinite_result.trusted(torch.float32, True)
    finally:
        nonfinite_result.reset()


def _lse_only(out, lse):
    return not bool(torch.isfinite(lse.div(lse).sum()))


def _lse_finite_only(lse):
    return not bool(torch.isfinite(lse.sum()))


@pytest.mark.parametrize("is_causal,name,weak", [(True, "lse_suspicious", _lse_finite_only), (False, "result_suspicious", _lse_only)])
def test_self_test_catches_a_weak_check(is_causal, name, weak, monkeypatch):
    # without the lse == 0 test the causal row whose only score is -inf (out 0, lse 0) passes;
    # lse alone misses a NaN value without is_causal
    monkeypatch.setattr(nonfinite_result, name, weak)
    assert not nonfinite_result._self_test(torch.float32, is_causal)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("is_causal", [False, True])
def test_self_test_passes_on_this_kernel(dtype, is_causal):
    assert nonfinite_result._self_test(dtype, is_causal)
