"""Logit soft-capping (``attnkit.biases.softcap(cap)``) against an independent float64 oracle.

The oracle writes the definition out: scores · scale, plus the position bias (ALiBi from the NumPy
reference's loop-based reading of the paper), then ``cap · tanh(x / cap)``, then the mask, softmax
and the weighted sum. Every exact backend that serves a score modifier must match it, forward and
gradients, with masks (fully masked rows included) and GQA; SDPA, which takes only an additive
float mask, must decline and say why. Float32 results sit within 2x the oracle's own float32 error.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import attnkit
import numpy_reference as npref
from _core_cases import exact_backends, max_err
from attnkit import biases as Bi
from attnkit import masks as M
from attnkit.core import cost, registry
from attnkit.core.call import make_call

B, H, Hkv, L, S, E, Ev = 2, 4, 2, 5, 7, 8, 6
CAP = 1.5  # small enough that most scores are bent by the cap


def _inputs(dtype=torch.float64, seed=0, shape=(B, H, Hkv, L, S, E, Ev), size=3.0):
    b, h, hkv, l, s, e, ev = shape
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, l, e, generator=g, dtype=torch.float64) * size  # large logits: the cap matters
    k = torch.randn(b, hkv, s, e, generator=g, dtype=torch.float64)
    v = torch.randn(b, hkv, s, ev, generator=g, dtype=torch.float64)
    return [t.to(dtype).requires_grad_() for t in (q, k, v)]


def oracle(q, k, v, cap, *, allowed=None, alibi=False, sinks=None):
    """out (B, H, L, Ev): scores · scale (+ ALiBi), capped, masked; rows with nothing allowed are 0."""
    b, h, l, e = q.shape
    s = k.shape[2]
    g = h // k.shape[1]
    kk, vv = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    x = q @ kk.transpose(-1, -2) / math.sqrt(e)  # (B, H, L, S)
    if alibi:
        x = x + torch.as_tensor(npref.alibi_bias(h, l, s), dtype=x.dtype)[None]
    x = cap * torch.tanh(x / cap)
    ok = torch.ones(b, h, l, s, dtype=torch.bool) if allowed is None else allowed.expand(b, h, l, s)
    row_any = ok.any(-1, keepdim=True)  # (B, H, L, 1)
    x = x.masked_fill(~ok | ~row_any, float("-inf")).masked_fill(~row_any, 0.0)  # empty rows: any finite row, zeroed below
    if sinks is not None:
        x = torch.cat([x, sinks.view(1, h, 1, 1).expand(b, h, l, 1).to(x.dtype)], -1)
    w = torch.softmax(x, -1)[..., :s] * row_any
    return w @ vv


def _padding_allowed():
    lengths = torch.tensor([S - 3, 0])  # batch row 1 sees no key
    return (torch.arange(S) < lengths[:, None])[:, None, None, :]


MASKS = {
    "none": (lambda: None, lambda: None),
    "causal": (lambda: M.causal(), lambda: torch.ones(L, S, dtype=torch.bool).tril(S - L)),
    "padding": (lambda: M.padding_mask(torch.tensor([S - 3, 0]), S), _padding_allowed),
}


def _grads(out, inputs, gout):
    return torch.autograd.grad((out.double() * gout).sum(), inputs)


def _check(backend, mask_name, dtype, *, alibi=False, tiles=None, bias=None):
    q, k, v = _inputs(dtype)
    mask, allowed = MASKS[mask_name][0](), MASKS[mask_name][1]()
    if bias is None:
        bias = [Bi.ALiBi(H), Bi.softcap(CAP)] if alibi else Bi.softcap(CAP)
    opts = attnkit.options(block_q=tiles, block_kv=tiles) if tiles else attnkit.options()
    with opts:
        res = attnkit.attention(q, k, v, mask=mask, bias=bias, backend=backend)
        gout = torch.randn(res.out.shape, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
        got = _grads(res.out, (q, k, v), gout)
    x64 = [t.detach().double().requires_grad_() for t in (q, k, v)]
    o64 = oracle(*x64, CAP, allowed=allowed, alibi=alibi)
    want = _grads(o64, x64, gout)
    if dtype == torch.float64:
        assert max_err(res.out, o64) <= 1e-12
        for n, a, b in zip("qkv", got, want):
            assert max_err(a, b) <= 1e-11, f"d{n}: {max_err(a, b):.3g}"
        return
    x32 = [t.detach().requires_grad_() for t in (q, k, v)]
    o32 = oracle(*x32, CAP, allowed=allowed, alibi=alibi)
    own = _grads(o32, x32, gout.to(dtype))
    assert max_err(res.out, o64) <= 2 * max_err(o32, o64) + 1e-6
    for n, a, b, c in zip("qkv", got, want, own):
        assert max_err(a, b) <= 2 * max_err(c, b) + 1e-6, f"d{n}: {max_err(a, b):.3g} vs oracle's own {max_err(c, b):.3g}"


def test_the_cap_bends_these_scores():
    # guard against a vacuous test: with these inputs the cap changes the output by far more than rounding
    q, k, v = _inputs()
    plain = attnkit.attention(q, k, v, backend="reference").out
    assert max_err(plain, oracle(q, k, v, CAP)) > 0.1


def _serves(backend, bias):
    q, k, v = _inputs()
    return registry.get(backend).supports(make_call(q, k, v, bias=bias))


def test_sdpa_declines_and_auto_picks_a_backend_that_applies_it():
    why = _serves("sdpa", Bi.softcap(CAP))
    assert why is not None and "additive" in why
    q, k, v = _inputs()
    res = attnkit.attention(q, k, v, bias=Bi.softcap(CAP))
    assert res.report.backend != "sdpa" and "additive" in res.report.rejected["sdpa"]
    assert max_err(res.out, oracle(q, k, v, CAP)) <= 1e-12


@pytest.mark.parametrize("mask_name", list(MASKS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("backend", ["reference"] + exact_backends())
def test_forward_and_gradients_match_the_float64_oracle(backend, mask_name, dtype):
    if _serves(backend, Bi.softcap(CAP)) is not None:
        pytest.skip(f"{backend} declines score modifiers (checked above for sdpa)")
    _check(backend, mask_name, dtype)


@pytest.mark.parametrize("mask_name", list(MASKS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("backend", ["reference"] + exact_backends())
def test_after_alibi_as_gemma2_orders_them(backend, mask_name, dtype):
    if _serves(backend, [Bi.ALiBi(H), Bi.softcap(CAP)]) is not None:
        pytest.skip(f"{backend} declines score modifiers")
    _check(backend, mask_name, dtype, alibi=True)


@pytest.mark.parametrize("mask_name", list(MASKS))
def test_blockwise_tile_loop_with_small_tiles(mask_name):
    _check("blockwise", mask_name, torch.float64, tiles=3)
    _check("blockwise", mask_name, torch.float32, tiles=3, alibi=True)


def test_the_cap_applies_to_the_biased_score_wherever_it_is_listed():
    q, k, v = _inputs()
    first = attnkit.attention(q, k, v, bias=[Bi.softcap(CAP), Bi.ALiBi(H)], backend="reference").out
    last = attnkit.attention(q, k, v, bias=[Bi.ALiBi(H), Bi.softcap(CAP)], backend="reference").out
    assert torch.equal(first, last)
    assert max_err(first, oracle(q, k, v, CAP, alibi=True)) <= 1e-12


@pytest.mark.parametrize("backend", ["reference", "blockwise"])
def test_with_attention_sinks(backend):
    q, k, v = _inputs()
    sinks = torch.randn(H, generator=torch.Generator().manual_seed(4), dtype=torch.float64).requires_grad_()
    allowed = _padding_allowed()
    res = attnkit.attention(q, k, v, mask=MASKS["padding"][0](), bias=Bi.softcap(CAP), sinks=sinks, backend=backend)
    o64 = oracle(q, k, v, CAP, allowed=allowed, sinks=sinks)
    assert max_err(res.out, o64) <= 1e-12
    for a, b in zip(torch.autograd.grad(res.out.sum(), (q, k, sinks)), torch.autograd.grad(o64.sum(), (q, k, sinks))):
        assert max_err(a, b) <= 1e-11


@pytest.mark.parametrize("backend", ["reference", "blockwise"])
def test_gradcheck_float64(backend):
    shape = (1, 2, 1, 3, 4, 3, 2)
    q, k, v = _inputs(shape=shape, size=2.0)
    mask = M.padding_mask(torch.tensor([3]), 4) & M.causal()

    def f(q, k, v):
        return attnkit.attention(q, k, v, mask=mask, bias=[Bi.ALiBi(2), Bi.softcap(1.0)], backend=backend).out

    assert torch.autograd.gradcheck(f, (q, k, v), fast_mode=True)
    with attnkit.options(block_q=2, block_kv=2):
        assert torch.autograd.gradcheck(f, (q, k, v), fast_mode=True)


def test_the_cost_model_counts_the_cap_per_score():
    # auto's estimates price the cap as its own cost_per_element passes over every score element
    q, k, v = _inputs()
    plain, capped = make_call(q, k, v), make_call(q, k, v, bias=Bi.softcap(CAP))
    ref = registry.get("reference").estimate
    extra = ref(capped)["time_s"] - ref(plain)["time_s"]
    pairs = B * H * L * S
    assert math.isclose(extra, pairs * Bi.SoftCap.cost_per_element / cost.RATES["elem_per_s"], rel_tol=1e-9)
    assert Bi.SoftCap.cost_per_element > 0


def test_near_zero_it_is_the_identity_and_it_never_exceeds_the_cap():
    fn = Bi.softcap(50.0).score_mod(1, 1)
    x = torch.tensor([-1e4, -60.0, -1e-3, 0.0, 1e-3, 60.0, 1e4], dtype=torch.float64)
    y = fn(x, None, None, None, None)
    assert bool((y.abs() < 50.0 + 1e-12).all())
    np.testing.assert_allclose(y[2:5].numpy(), x[2:5].numpy(), rtol=1e-9)


@pytest.mark.parametrize(
    "cap, err, words",
    [
        (0.0, ValueError, ["positive finite", "got 0.0", "Gemma 2"]),
        (-30.0, ValueError, ["positive finite", "-30"]),
        (float("inf"), ValueError, ["positive finite", "inf"]),
        (float("nan"), ValueError, ["positive finite", "nan"]),
        (True, TypeError, ["real number", "bool"]),
        ("30", TypeError, ["real number", "str"]),
        (None, TypeError, ["real number", "NoneType"]),
    ],
)
def test_bad_caps_are_refused_with_the_fix(cap, err, words):
    with pytest.raises(err) as e:
        Bi.softcap(cap)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


@pytest.mark.parametrize("mask_name", list(MASKS))
def test_forward_only_on_every_backend_that_serves_it(mask_name):
    # inference: backends that serve only without gradients (and any registered later) must match too
    q, k, v = (t.detach().float() for t in _inputs())
    mask, allowed = MASKS[mask_name][0](), MASKS[mask_name][1]()
    bias = [Bi.ALiBi(H), Bi.softcap(CAP)]
    with torch.no_grad():
        call = make_call(q, k, v, mask=mask, bias=bias)
        names = [b.name for b in registry.available() if b.exact and b.supports(call) is None]
        o64 = oracle(*(t.double() for t in (q, k, v)), CAP, allowed=allowed, alibi=True)
        o32 = oracle(q, k, v, CAP, allowed=allowed, alibi=True)
        for name in names:
            res = attnkit.attention(q, k, v, mask=mask, bias=bias, backend=name)
            assert max_err(res.out, o64) <= 2 * max_err(o32, o64) + 1e-6, name
    assert {"reference", "blockwise"} <= set(names)
