"""Attention sinks (``attnkit.attention(..., sinks=s)``) against an independent float64 oracle.

The oracle is the definition written out: a softmax over the scores with one more column holding
the sink logit (explicit concatenation), the sink's column then dropped (its value is zero). Every
exact backend that serves sink calls must match it, forward, lse and gradients with respect to q, k,
v and the sinks, with masks (fully masked rows included), biases and GQA, on the blockwise backend's
fused route (whose lse gradient re-runs the tile loop) and on its tile loop. A backend that declines
must say why. Float32 results must sit within 2x the oracle's own float32 error (flash-attention's rule).
"""

from __future__ import annotations

import math

import pytest
import torch

import attnkit
from _core_cases import exact_backends, max_err
from attnkit import masks as M
from _routes import route_of
from attnkit.core import registry
from attnkit.core.call import make_call

B, H, Hkv, L, S, E, Ev = 2, 4, 2, 5, 7, 8, 6  # odd sizes, GQA (2 query heads per kv head), L < S


def _inputs(dtype=torch.float64, seed=0, sink_shape=(H,), shape=(B, H, Hkv, L, S, E, Ev)):
    b, h, hkv, l, s, e, ev = shape
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, l, e, generator=g, dtype=torch.float64)
    k = torch.randn(b, hkv, s, e, generator=g, dtype=torch.float64)
    v = torch.randn(b, hkv, s, ev, generator=g, dtype=torch.float64)
    sinks = torch.randn(sink_shape, generator=g, dtype=torch.float64) * 1.5
    return [t.to(dtype).requires_grad_() for t in (q, k, v, sinks)]


def oracle(q, k, v, sinks, allowed=None, bias=None, scale=None):
    """(out (B, H, L, Ev), weights (B, H, L, S), lse (B, H, L)) of the sink softmax, written out:
    scores with the sink logit concatenated as one more key, softmax, the sink's column dropped."""
    b, h, l, e = q.shape
    s = k.shape[2]
    g = h // k.shape[1]
    kk, vv = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)  # (B, H, S, ·)
    sc = q @ kk.transpose(-1, -2) * (1 / math.sqrt(e) if scale is None else scale)  # (B, H, L, S)
    if bias is not None:
        sc = sc + bias
    if allowed is not None:
        sc = sc.masked_fill(~allowed, float("-inf"))
    sink_col = (sinks.view(1, h, 1) if sinks.dim() == 1 else sinks).unsqueeze(-1).expand(b, h, l, 1)
    full = torch.cat([sc, sink_col.to(sc.dtype)], -1)  # (B, H, L, S + 1)
    w = torch.softmax(full, -1)[..., :s]
    return w @ vv, w, torch.logsumexp(full, -1)


def _causal_allowed():
    return torch.ones(L, S, dtype=torch.bool).tril(S - L)  # bottom-right: query i sees keys <= i + S - L


def _padding_allowed():
    lengths = torch.tensor([S - 2, 0])  # batch row 1 sees no key: fully masked rows
    return (torch.arange(S) < lengths[:, None])[:, None, None, :]  # (B, 1, 1, S)


# name: (attnkit mask, the same allowed pairs built here, broadcastable to (B, H, L, S))
MASKS = {
    "none": (lambda: None, lambda: None),
    "causal": (lambda: M.causal(), _causal_allowed),
    "padding": (lambda: M.padding_mask(torch.tensor([S - 2, 0]), S), _padding_allowed),
    "tensor_with_empty_rows": (
        lambda: _random_allowed(),
        lambda: _random_allowed(),
    ),
}


def _random_allowed():
    a = torch.rand(B, 1, L, S, generator=torch.Generator().manual_seed(5)) > 0.4
    a[0, 0, 1] = False  # a fully masked row in batch row 0
    return a


def _serving_backends(call):
    """Exact backends that serve ``call``; the ones that decline must name the sinks (or another reason)."""
    names = []
    for b in registry.available():
        if b.exact and b.supports(call) is None:
            names.append(b.name)
    return names


def _grads(out_lse, inputs, gout, glse):
    """Gradients of a loss on out and on lse: d(lse) must reach q, k and the sinks through the backend."""
    out, lse = out_lse
    return torch.autograd.grad((out.double() * gout).sum() + (lse.double() * glse).sum(), inputs)


def _check_backend(name, mask_name, dtype, tiles, bias=None, shape=(B, H, Hkv, L, S, E, Ev)):
    q, k, v, sinks = _inputs(dtype, shape=shape)
    mask = MASKS[mask_name][0]()
    allowed = MASKS[mask_name][1]()
    with attnkit.options(block_q=tiles, block_kv=tiles) if tiles else _nothing():
        res = attnkit.attention(q, k, v, mask=mask, bias=bias, sinks=sinks, backend=name)
        g = torch.Generator().manual_seed(9)
        gout = torch.randn(res.out.shape, generator=g, dtype=torch.float64)
        glse = torch.randn(res.lse.shape, generator=g, dtype=torch.float64)
        got = _grads((res.out, res.lse), (q, k, v, sinks), gout, glse)
    x64 = [t.detach().double().requires_grad_() for t in (q, k, v, sinks)]
    bias64 = None if bias is None else bias.double()
    o64, _, lse64 = oracle(*x64, allowed, bias64)
    want = _grads((o64, lse64), x64, gout, glse)
    if dtype == torch.float64:
        assert max_err(res.out, o64) <= 1e-12 and max_err(res.lse, lse64) <= 1e-12
        for n, a, b in zip("qkvs", got, want):
            assert max_err(a, b) <= 1e-11, f"d{n}: {max_err(a, b):.3g}"
        return
    # float32: within 2x the oracle's own float32 error (+ a few ulps for values that are exact there)
    x32 = [t.detach().to(dtype).requires_grad_() for t in (q, k, v, sinks)]
    o32, _, lse32 = oracle(*x32, allowed, None if bias is None else bias.to(dtype))
    own = _grads((o32, lse32), x32, gout.to(dtype), glse.to(dtype))
    assert max_err(res.out, o64) <= 2 * max_err(o32, o64) + 1e-6
    assert max_err(res.lse, lse64) <= 2 * max_err(lse32, lse64) + 1e-6
    for n, a, b, c in zip("qkvs", got, want, own):
        assert max_err(a, b) <= 2 * max_err(c, b) + 1e-6, f"d{n}: {max_err(a, b):.3g} vs oracle's own {max_err(c, b):.3g}"


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


def test_reference_and_blockwise_serve_sink_calls_and_sdpa_says_why_not():
    q, k, v, sinks = _inputs()
    call = make_call(q, k, v, sinks=sinks)
    serving = _serving_backends(call)
    assert {"reference", "blockwise"} <= set(serving)
    why = registry.get("sdpa").supports(call)
    if "sdpa" not in serving:  # until SDPA's lse is differentiable
        assert "sinks" in why and "log-sum-exp" in why
    res = attnkit.attention(q, k, v, sinks=sinks)
    assert res.report.backend in serving
    if "sdpa" not in serving:
        assert "sinks" in res.report.rejected["sdpa"]


@pytest.mark.parametrize("mask_name", list(MASKS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("backend", ["reference"] + exact_backends())
def test_forward_lse_and_gradients_match_the_float64_oracle(backend, mask_name, dtype):
    q, k, v, sinks = _inputs(dtype)
    if registry.get(backend).supports(make_call(q, k, v, mask=MASKS[mask_name][0](), sinks=sinks)) is not None:
        pytest.skip(f"{backend} declines sink calls (checked in the test above)")
    _check_backend(backend, mask_name, dtype, tiles=None)


@pytest.mark.parametrize("mask_name", list(MASKS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_blockwise_tile_loop_with_small_tiles(mask_name, dtype):
    # explicit tiles select the Python tile loop: several key tiles per row, online softmax across them
    _check_backend("blockwise", mask_name, dtype, tiles=3)


@pytest.mark.parametrize("mask_name", ["none", "causal", "padding"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_blockwise_fused_route_takes_the_lse_gradient(mask_name, dtype):
    # the fused kernel's backward op has no lse input: a gradient on lse re-runs the tile loop
    shape = (B, H, Hkv, L, S, E, E)  # the kernel needs Ev == E
    q, k, v, sinks = _inputs(dtype, shape=shape)
    assert route_of(make_call(q, k, v, mask=MASKS[mask_name][0](), sinks=sinks)) is not None, "not on the fused route"
    _check_backend("blockwise", mask_name, dtype, tiles=None, shape=shape)


@pytest.mark.parametrize("backend", ["reference", "blockwise"])
def test_with_an_additive_bias(backend):
    bias = torch.randn(1, H, L, S, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    _check_backend(backend, "causal", torch.float64, tiles=None, bias=bias)
    _check_backend(backend, "causal", torch.float64, tiles=4, bias=bias)


@pytest.mark.parametrize("sink_shape", [(1, H, 1), (B, H, 1), (1, H, L), (B, H, L)])
@pytest.mark.parametrize("backend", ["reference", "blockwise"])
def test_per_sequence_and_per_row_sinks(backend, sink_shape):
    q, k, v, sinks = _inputs(sink_shape=sink_shape)
    res = attnkit.attention(q, k, v, mask=M.causal(), sinks=sinks, backend=backend)
    o64, _, lse64 = oracle(q, k, v, sinks, _causal_allowed())
    assert max_err(res.out, o64) <= 1e-12 and max_err(res.lse, lse64) <= 1e-12
    ds, ds64 = (torch.autograd.grad(o.sum(), sinks)[0] for o in (res.out, o64))
    assert ds.shape == sinks.shape and max_err(ds, ds64) <= 1e-12


@pytest.mark.parametrize("backend", ["reference", "blockwise"])
def test_returned_weights_include_the_sink(backend):
    q, k, v, sinks = _inputs()
    res = attnkit.attention(q, k, v, mask=_random_allowed(), sinks=sinks, backend=backend, return_weights=True)
    _, w64, _ = oracle(q, k, v, sinks, _random_allowed())
    assert max_err(res.weights, w64) <= 1e-12
    assert bool((res.weights.sum(-1) < 1).all())  # the sink takes the rest of each row


@pytest.mark.parametrize("backend", ["reference", "blockwise"])
def test_fully_masked_rows_give_zeros_the_sink_lse_and_no_nan(backend):
    q, k, v, sinks = _inputs()
    with torch.no_grad():
        q[1].fill_(float("nan"))  # batch row 1 sees no key: whatever its queries hold never shows
    mask = M.padding_mask(torch.tensor([S - 2, 0]), S)
    res = attnkit.attention(q, k, v, mask=mask, sinks=sinks, backend=backend)
    assert torch.equal(res.out[1], torch.zeros_like(res.out[1]))
    assert torch.equal(res.lse[1], sinks.detach().view(H, 1).expand(H, L))  # all of the row's mass is the sink's
    gq, gk, gv, gs = torch.autograd.grad(res.out.sum() + res.lse.sum(), (q, k, v, sinks))
    assert all(bool(torch.isfinite(g).all()) for g in (gq, gk, gv, gs))
    assert torch.equal(gq[1], torch.zeros_like(gq[1]))
    assert res.report.fully_masked_rows == H * L


@pytest.mark.parametrize("backend", ["reference", "blockwise"])
def test_zero_sinks_equal_a_softmax_with_one_extra_zero_logit(backend):
    # a sink of 0 is "softmax off by one": out = plain out · Z / (Z + 1)
    q, k, v, _ = _inputs()
    plain = attnkit.attention(q, k, v, backend=backend)
    res = attnkit.attention(q, k, v, sinks=torch.zeros(H, dtype=torch.float64), backend=backend)
    z = plain.lse.exp()
    assert max_err(res.out, plain.out * (z / (z + 1)).unsqueeze(-1)) <= 1e-13


@pytest.mark.parametrize("backend", ["reference", "blockwise"])
def test_gradcheck_float64(backend):
    shape = (1, 2, 1, 3, 4, 3, 2)
    q, k, v, sinks = _inputs(shape=shape, sink_shape=(2,))
    mask = M.padding_mask(torch.tensor([3]), 4) & M.causal()

    def f(q, k, v, s):
        res = attnkit.attention(q, k, v, mask=mask, sinks=s, backend=backend)
        return res.out, res.lse

    assert torch.autograd.gradcheck(f, (q, k, v, sinks), fast_mode=True)
    with attnkit.options(block_q=2, block_kv=2):
        assert torch.autograd.gradcheck(f, (q, k, v, sinks), fast_mode=True)


def test_half_precision_within_twice_the_oracles_own_error():
    for dtype in (torch.bfloat16, torch.float16):
        q, k, v, sinks = _inputs(dtype)
        x64 = [t.detach().double() for t in (q, k, v, sinks)]
        o64 = oracle(*x64, _causal_allowed())[0]
        own = max_err(oracle(*[t.detach() for t in (q, k, v, sinks)], _causal_allowed())[0], o64)
        for backend in ("reference", "blockwise"):
            res = attnkit.attention(q, k, v, mask=M.causal(), sinks=sinks, backend=backend)
            assert res.out.dtype == dtype and res.lse.dtype == torch.float32
            assert max_err(res.out, o64) <= 2 * own, (backend, dtype)


def test_blockwise_attention_called_directly_applies_the_sinks():
    from attnkit.backends.blockwise import blockwise_attention

    q, k, v, sinks = _inputs()
    res = blockwise_attention(make_call(q, k, v, mask=M.causal(), sinks=sinks), block_q=2, block_kv=3)
    assert max_err(res.out, oracle(q, k, v, sinks, _causal_allowed())[0]) <= 1e-12


def test_empty_batch():
    q, k, v, sinks = _inputs(shape=(0, H, Hkv, L, S, E, Ev))
    res = attnkit.attention(q, k, v, sinks=sinks)
    assert res.out.shape == (0, H, L, Ev) and res.lse.shape == (0, H, L)
    (res.out.sum() + res.lse.sum()).backward()
    assert sinks.grad is not None and torch.equal(sinks.grad, torch.zeros(H, dtype=torch.float64))


# bad input ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "sinks, err, words",
    [
        ([0.0] * H, TypeError, ["sinks must be a floating-point torch.Tensor", "list"]),
        (torch.zeros(H, dtype=torch.long), TypeError, ["floating-point", "int64", "sinks.float()"]),
        (torch.zeros(H + 1), ValueError, ["shape", f"({H + 1},)", f"({H},)"]),
        (torch.zeros(B, H), ValueError, ["shape", f"({B}, {H})"]),
        (torch.zeros(3, H, 1), ValueError, ["shape", f"(3, {H}, 1)"]),
        (torch.zeros(1, H, L + 1), ValueError, ["shape", f"{L}|1"]),
        (torch.zeros(H, device="meta"), ValueError, ["device", "meta", "sinks.to(q.device)"]),
        (torch.tensor([0.0, float("inf"), 0.0, 0.0]), ValueError, ["finite", "inf"]),
        (torch.tensor([0.0, float("nan"), 0.0, 0.0]), ValueError, ["finite", "nan"]),
        (torch.tensor([float("-inf")] * H), ValueError, ["finite", "-inf"]),
    ],
)
def test_bad_sinks_are_refused_with_the_fix(sinks, err, words):
    q, k, v, _ = _inputs(torch.float32)
    with pytest.raises(err) as e:
        attnkit.attention(q, k, v, sinks=sinks)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_backends_that_cannot_serve_sinks_say_so():
    q, k, v, sinks = _inputs(torch.float32)
    with pytest.raises(ValueError, match="backend='linear' cannot serve this call: .*sinks"):
        attnkit.attention(q, k, v, sinks=sinks, backend="linear")
    if registry.get("sdpa").supports(make_call(q, k, v, sinks=sinks)) is not None:
        with pytest.raises(ValueError, match="backend='sdpa' cannot serve this call: .*log-sum-exp.*sinks"):
            attnkit.attention(q, k, v, sinks=sinks, backend="sdpa")


def test_a_backend_without_a_differentiable_lse_is_refused_not_silently_wrong():
    # a backend that returns an lse with no gradient would drop the sinks' share of dq, dk: refused
    from attnkit.backends import reference

    def detached(call):
        res = reference.run(call)
        res.lse = res.lse.detach()
        return res

    def no_lse(call):
        res = reference.run(call)
        res.lse = None
        return res

    q, k, v, sinks = _inputs()
    try:
        registry.register("test_detached_lse", detached, priority=-100)
        registry.register("test_no_lse", no_lse, priority=-100)
        with pytest.raises(ValueError, match="log-sum-exp without gradients"):
            attnkit.attention(q, k, v, sinks=sinks, backend="test_detached_lse")
        with torch.no_grad():  # no gradient needed: its lse serves
            attnkit.attention(q, k, v, sinks=sinks, backend="test_detached_lse")
        with pytest.raises(ValueError, match="returned no log-sum-exp"):
            attnkit.attention(q, k, v, sinks=sinks, backend="test_no_lse")
    finally:
        registry.unregister("test_detached_lse")
        registry.unregister("test_no_lse")


@pytest.mark.parametrize("mask_name", ["none", "causal", "tensor_with_empty_rows"])
def test_forward_only_on_every_backend_that_serves_it(mask_name):
    # inference: backends that serve only without gradients (and any registered later) must match too
    q, k, v, sinks = (t.detach() for t in _inputs(torch.float32))
    mask, allowed = MASKS[mask_name][0](), MASKS[mask_name][1]()
    with torch.no_grad():
        names = _serving_backends(make_call(q, k, v, mask=mask, sinks=sinks))
        o64, _, lse64 = oracle(*(t.double() for t in (q, k, v, sinks)), allowed)
        o32, _, lse32 = oracle(q, k, v, sinks, allowed)
        for name in names:
            res = attnkit.attention(q, k, v, mask=mask, sinks=sinks, backend=name)
            assert max_err(res.out, o64) <= 2 * max_err(o32, o64) + 1e-6, name
            assert max_err(res.lse, lse64) <= 2 * max_err(lse32, lse64) + 1e-6, name
    assert {"reference", "blockwise"} <= set(names)


# every mask × bias × score of the core vocabulary: the other backends equal the reference, which the
# oracle above checks directly ---------------------------------------------------------------------
def _parity(backend, score_name, mask_name, bias_name, tiles=None):
    from _core_cases import BIASES, MASKS as CORE_MASKS, SCORES, SHAPES, make_qkv

    shape = SHAPES["rect-gqa"]
    q, k, v = make_qkv(shape, torch.float64, requires_grad=True)
    sinks = torch.tensor([1.0, -0.5, 2.0, 0.0], dtype=torch.float64, requires_grad=True)
    torch.manual_seed(0)
    score, mask, bias = SCORES[score_name](shape), CORE_MASKS[mask_name](shape), BIASES[bias_name](shape)
    if score is not None and not isinstance(score, str):
        score = score.double()
    # float64 throughout: float32 bias parts (ALiBi's slopes, a float32 tensor) would be summed in float32
    # per tile by blockwise and in float64 by the reference (test_backend_parity.py allows 1e-6 for that)
    bias = [p.double() for p in bias] if isinstance(bias, list) else bias.double() if bias is not None else None
    results = []
    for name in ("reference", backend):
        with attnkit.options(block_q=tiles, block_kv=tiles) if tiles else _nothing():
            res = attnkit.attention(q, k, v, score=score, mask=mask, bias=bias, sinks=sinks, backend=name)
            gout = torch.randn(res.out.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
            grads = _grads((res.out, res.lse), (q, k, v, sinks), gout, torch.ones_like(res.lse))
        results.append((res.out, res.lse, grads))
    (o1, l1, g1), (o2, l2, g2) = results
    assert max_err(o1, o2) <= 1e-12 and max_err(l1, l2) <= 1e-12
    for n, a, b in zip("qkvs", g1, g2):
        assert max_err(a, b) <= 1e-11, f"d{n}: {max_err(a, b):.3g}"


def _core_names():
    from _core_cases import BIASES, MASKS as CORE_MASKS, SCORES

    return list(SCORES), list(CORE_MASKS), list(BIASES)


@pytest.mark.parametrize("bias_name", _core_names()[2])
@pytest.mark.parametrize("mask_name", _core_names()[1])
def test_blockwise_equals_the_reference_for_every_mask_and_bias(mask_name, bias_name):
    _parity("blockwise", "default", mask_name, bias_name)


@pytest.mark.parametrize("score_name", _core_names()[0])
def test_blockwise_equals_the_reference_for_every_score(score_name):
    _parity("blockwise", score_name, "pad_right", "none")
    _parity("blockwise", score_name, "causal_br", "alibi", tiles=3)
