"""The band route's interior backward (key-major weights, dk and dv accumulated by their GEMMs).

:mod:`attnkit.backends.blockwise.kernel.band_windows` runs the interior blocks of a banded call a
group of blocks per GEMM. Checked here, with the group size forced small so that a head's blocks
span several groups and the last group is short:

* float32 gradients against a float64 oracle (plain PyTorch autograd), within twice the float32
  error of that same plain computation (flash-attention's rule), GQA, windows on one and both
  sides, large scores, a gradient into the returned lse;
* bf16 inputs (converted to float32 a head at a time): within the bf16 plain computation's error;
* asking for a subset of (dq, dk, dv) gives the same gradients, bit for bit, as asking for all three;
* float64 ``gradcheck`` of out and lse together.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from attnkit import masks as M
from attnkit.backends.blockwise import blockwise_attention
from attnkit.backends.blockwise.kernel import band_windows as fused_band_windows
from attnkit.backends.blockwise.kernel.band_grad import band_grads, backward_band
from _routes import route_of
from attnkit.core.call import make_call

from _grad_oracle import grad_inputs, grads_of, max_err, oracle

CASES = {  # mask, (B, H, Hkv, L, S, E)
    "window_256_one_side_gqa": (M.sliding_window(255, 0), (1, 4, 2, 640, 640, 16)),
    "window_both_sides_l_lt_s": (M.sliding_window(150, 30), (2, 2, 1, 500, 530, 8)),
    "window_small_mqa": (M.sliding_window(20, 9), (1, 3, 1, 400, 400, 8)),
}


def _small_groups(monkeypatch, band, k, v) -> None:
    """A few blocks per GEMM, not dividing the interior: several groups per head and a short last one."""
    bb = backward_band(band, k, v)
    nb = bb.interior[1] - bb.interior[0]
    per = next(p for p in (2, 3, 4) if nb % p)
    assert nb > per
    monkeypatch.setattr(fused_band_windows, "GEMM_ELEMS", per * bb.b * bb.w)


def _fused(mask):
    def fn(q, k, v):
        res = blockwise_attention(make_call(q, k, v, mask=mask))
        assert "banded windows" in res.report.reason
        return res.out, res.lse
    return fn


def _grad_errors(monkeypatch, case: str, magnitude: float, seed: int, dtype: torch.dtype):
    """(name, route error, plain softmax error in ``dtype``) of dq, dk, dv against the float64 oracle,
    with the route forced onto several small groups of blocks."""
    mask, shape = CASES[case]
    q, k, v, dout, dlse = grad_inputs(shape, magnitude, seed=seed, dtype=dtype)
    _small_groups(monkeypatch, route_of(make_call(q, k, v, mask=mask)).band, k, v)
    truth = grads_of(lambda *t: oracle(*t, mask), q, k, v, dout, dlse, torch.float64)
    ref = grads_of(lambda *t: oracle(*t, mask), q, k, v, dout, dlse, dtype)
    got = grads_of(_fused(mask), q, k, v, dout, dlse, dtype)
    out = []
    for name, a, r, t in zip("qkv", got, ref, truth):
        assert a.dtype == dtype and a.shape == t.shape
        out.append((name, max_err(a, t), max_err(r, t)))
    return out


@pytest.mark.parametrize("magnitude", [1.0, 4.0], ids=["scores_small", "scores_large"])
@pytest.mark.parametrize("case", list(CASES))
def test_float32_gradients_within_twice_the_reference_error(monkeypatch, case, magnitude):
    for name, err, ref_err in _grad_errors(monkeypatch, case, magnitude, 0, torch.float32):
        assert err <= 2 * ref_err + 1e-6, (name, err, ref_err)


@pytest.mark.parametrize("case", list(CASES))
def test_bf16_gradients_within_the_plain_bf16_error(monkeypatch, case):
    for name, err, ref_err in _grad_errors(monkeypatch, case, 1.0, 2, torch.bfloat16):
        assert err <= ref_err, (name, err, ref_err)


@pytest.mark.parametrize("case", list(CASES))
def test_a_subset_of_the_gradients_equals_the_same_part_of_all_three(monkeypatch, case):
    mask, shape = CASES[case]
    q, k, v, dout, dlse = grad_inputs(shape, 2.0, seed=1)
    route = route_of(make_call(q, k, v, mask=mask))
    _small_groups(monkeypatch, route.band, k, v)
    _, lse = route.forward(q, k, v)
    every = band_grads(dout, q, k, v, lse, dlse, mask, route.band, route.scale, (True, True, True))
    for need in itertools.product([False, True], repeat=3):
        if not any(need):
            continue
        got = band_grads(dout, q, k, v, lse, dlse, mask, route.band, route.scale, need)
        for n, a, b in zip(need, got, every):
            assert (a is None) if not n else torch.equal(a, b), need


@pytest.mark.parametrize("case", ["one_side", "both_sides"])
def test_float64_gradcheck_of_out_and_lse(monkeypatch, case):
    mask, L = {"one_side": (M.sliding_window(20, 0), 160), "both_sides": (M.sliding_window(20, 15), 190)}[case]
    g = torch.Generator().manual_seed(7)
    q = torch.randn(1, 2, L, 4, generator=g, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(1, 1, L, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    _small_groups(monkeypatch, route_of(make_call(q, k, v, mask=mask)).band, k, v)
    assert torch.autograd.gradcheck(_fused(mask), (q, k, v), eps=1e-6, atol=1e-8)


@pytest.mark.parametrize("case", list(CASES))
def test_padded_and_unpadded_windows_give_the_same_gradients(monkeypatch, case):
    # the backward pads each window to a multiple of 64 keys when the padding keys are finite; the
    # padding key is masked for every query, so the gradients must not depend on it
    mask, shape = CASES[case]
    q, k, v, dout, dlse = grad_inputs(shape, 2.0, seed=3)
    route = route_of(make_call(q, k, v, mask=mask))
    assert backward_band(route.band, k, v).pad > 0
    _, lse = route.forward(q, k, v)
    padded = band_grads(dout, q, k, v, lse, dlse, mask, route.band, route.scale, (True, True, True))
    monkeypatch.setattr("attnkit.backends.blockwise.kernel.band_grad.pad_keys_finite", lambda *a: False)
    plain = band_grads(dout, q, k, v, lse, dlse, mask, route.band, route.scale, (True, True, True))
    truth = grads_of(lambda *t: oracle(*t, mask), q, k, v, dout, dlse, torch.float64)
    for a, b, t in zip(padded, plain, truth):
        assert max_err(a, b) <= 2 * max_err(b, t) + 1e-6


def test_a_nan_in_a_padding_key_keeps_the_gradients_finite():
    # top-left window, L < S: key 512 is the padding key of the last interior block and no query
    # sees it; a NaN there must switch the backward's padding off, not reach dq, dk or dv
    L, S, E = 512, 1024, 16
    mask = M.sliding_window(255, 0, align="top_left")
    q, k, v, dout, dlse = grad_inputs((1, 2, 2, L, S, E), 1.0, seed=4)
    band = backward_band(route_of(make_call(q, k, v, mask=mask)).band, k, v)
    assert band.pad > 0 and band.start(band.interior[1] - 1) + band.w - 1 == 512
    clean = grads_of(_fused(mask), q, k, v, dout, dlse, torch.float32)
    k[:, :, 512] = float("nan")
    v[:, :, 512] = float("nan")
    got = grads_of(_fused(mask), q, k, v, dout, dlse, torch.float32)
    truth = grads_of(lambda *t: oracle(*t, mask), q, k.nan_to_num(0.0), v.nan_to_num(0.0), dout, dlse, torch.float64)
    for a, c, t in zip(got, clean, truth):
        assert torch.isfinite(a).all()
        assert max_err(a, t) <= 2 * max_err(c, t) + 1e-6
