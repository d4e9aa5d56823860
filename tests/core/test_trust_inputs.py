"""Valid inputs give right answers on every backend (issue: no cache, mode or hidden parameter may
change an answer): ``scale <= 0`` with causal and prefix-LM masks (torch's ``is_causal`` kernel
returns NaN there), a soft-cap beyond float32's range, score_mods returning a Python constant or an
int tensor, a bias returning float64 for float32 inputs, and a mask_mod that builds meta tensors.

The oracle is the reference backend in float64 (itself checked against NumPy in
tests/core/test_numpy_reference.py); float32 results must stay within a few times the float32
reference's own error against it.

Shape legend: q (B, H, L, E), k and v (B, H, S, E).
"""

from __future__ import annotations

import pytest
import torch

import attnkit
from attnkit import biases, masks

BACKENDS = ("reference", "sdpa", "blockwise", "auto")


def _qkv(L: int, S: int, dtype, seed: int = 0, grad: bool = False):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, 2, n, 8, generator=g, dtype=torch.float64).to(dtype).requires_grad_(grad) for n in (L, S, S)]


def _run(q, k, v, backend, **kw):
    """out and the gradients of q, k, v for a fixed upstream gradient."""
    out = attnkit.attention(q, k, v, backend=backend, **kw).out
    w = torch.linspace(-1, 1, out.shape[-1], dtype=out.dtype)
    grads = torch.autograd.grad((out * w).sum(), (q, k, v))
    return [out.detach(), *grads]


def _close(got, want, ref32=None, factor: float = 4.0):
    """Each tensor finite and within ``factor`` × the float32 reference's own error (plus an ulp) of
    the float64 oracle; exact to 1e-12 in float64."""
    for i, (g, w) in enumerate(zip(got, want)):
        assert torch.isfinite(g).all(), f"tensor {i}: non-finite values"
        if g.dtype == torch.float64:
            torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)
        else:
            own = float((ref32[i].double() - w).abs().max())
            err = float((g.double() - w).abs().max())
            assert err <= factor * own + 1e-6, f"tensor {i}: error {err:.3g} vs the float32 reference's {own:.3g}"


SCALE_MASKS = {
    "causal": lambda L: masks.causal(),
    "causal-top-left": lambda L: masks.causal(align="top_left"),
    "prefix-lm-int": lambda L: masks.prefix_lm(L // 3),
    "prefix-lm-tensor": lambda L: masks.prefix_lm(torch.tensor([L // 3])),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mask", sorted(SCALE_MASKS))
@pytest.mark.parametrize("scale", [0.0, -0.4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_scale_at_or_below_zero_with_causal_masks_is_exact(backend, mask, scale, dtype):
    L = S = 300  # past one kernel block: the fused causal and prefix-LM routes split here
    q, k, v = _qkv(L, S, dtype, grad=True)
    m = SCALE_MASKS[mask](L)
    want = _run(*(t.detach().double().requires_grad_() for t in (q, k, v)), "reference", mask=m, scale=scale)
    ref32 = _run(q, k, v, "reference", mask=m, scale=scale) if dtype == torch.float32 else None
    _close(_run(q, k, v, backend, mask=m, scale=scale), want, ref32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scale_zero_causal_forward_without_grad(backend):
    """The inference path (no autograd: sdpa's kernel is called directly) is exact too: uniform
    weights over each row's keys, so row i is the mean of v[:i + 1]."""
    q, k, v = _qkv(40, 40, torch.float64)
    want = v.cumsum(2) / torch.arange(1, 41, dtype=torch.float64).view(1, 1, 40, 1)
    for _ in range(2):  # the second call of a signature runs its kept plan (attnkit.core.call_cache)
        with torch.no_grad():
            out = attnkit.attention(q, k, v, mask=masks.causal(), scale=0.0, backend=backend).out
        torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", ["reference", "blockwise", "auto"])
@pytest.mark.parametrize("cap", [3.5e38, 1e39, 1e300])
def test_a_softcap_beyond_float32_is_the_uncapped_answer(backend, cap):
    """cap · tanh(s / cap) = s to rounding for such caps; in float32 the cap itself is inf and
    0 · inf made every output NaN."""
    q, k, v = _qkv(70, 70, torch.float32, grad=True)
    want = _run(q, k, v, "reference")
    got = _run(q, k, v, backend, bias=biases.softcap(cap))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", ["reference", "blockwise", "auto"])
def test_a_score_mod_returning_a_python_constant_is_broadcast(backend):
    """Every score the same: uniform weights, the mean of v over each row's allowed keys."""
    q, k, v = _qkv(40, 50, torch.float64)
    out = attnkit.attention(q, k, v, bias=biases.score_mod(lambda s, b, h, qi, kv: 2.5), backend=backend).out
    torch.testing.assert_close(out, v.mean(2, keepdim=True).expand_as(out), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", ["reference", "blockwise", "auto"])
def test_a_score_mod_returning_an_int_tensor_equals_its_float_form(backend):
    q, k, v = _qkv(40, 40, torch.float64)
    as_int = attnkit.attention(q, k, v, bias=biases.score_mod(lambda s, b, h, qi, kv: (qi - kv) // 8), backend=backend).out
    as_float = attnkit.attention(q, k, v, bias=biases.score_mod(lambda s, b, h, qi, kv: ((qi - kv) // 8).double()),
                                 backend="reference").out
    torch.testing.assert_close(as_int, as_float, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_float64_bias_for_float32_inputs_is_cast(backend):
    """The bias's values in float32 (rounded once), the result float32, as with a float32 bias."""
    q, k, v = _qkv(60, 60, torch.float32, grad=True)

    def bias64(b, h, qi, kv):
        return -0.05 * (qi - kv).abs().to(torch.float64)

    def bias32(b, h, qi, kv):
        return bias64(b, h, qi, kv).float()

    got = _run(q, k, v, backend, bias=biases.custom_bias(bias64))
    want = _run(q, k, v, "reference", bias=biases.custom_bias(bias32))
    assert got[0].dtype == torch.float32
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_mask_mod_returning_a_meta_tensor_is_a_clear_error(backend):
    q, k, v = _qkv(16, 16, torch.float32)

    def meta_mask(b, h, qi, kv):
        return torch.ones(qi.shape[-2], kv.shape[-1], dtype=torch.bool, device="meta")

    with pytest.raises(ValueError, match="meta device"):
        attnkit.attention(q, k, v, mask=meta_mask, backend=backend)
