"""Hypothesis properties of attention, a few hundred tiny random calls each.

* weights rows sum to 1 wherever a key is allowed, and are all 0 where none is;
* masked weights are exactly 0 (not 1e-30: -inf, never -1e9);
* permutation equivariance without mask or bias: permuting queries permutes the output, permuting
  keys and values together changes nothing;
* causal prefix invariance: changing tokens at positions >= t never changes outputs before t.

The first runs on the backends that return weights (reference and blockwise; SDPA gives none), the
last two on every exact backend (new ones are picked up from the registry). Which backend serves
which case is pinned in ``tests/backends/_backend_coverage.py``; a backend that declines a case the
table says it serves fails here, it is never swapped for ``reference`` or skipped.
"""

from __future__ import annotations

import pytest
import torch

import attnkit
from _backend_coverage import served
from _core_cases import exact_backends
from attnkit import biases as Bi
from attnkit import masks as M
from attnkit.core import registry
from attnkit.core.call import make_call

hyp = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

BACKENDS = ["reference"] + exact_backends()
WEIGHT_BACKENDS = [b for b in BACKENDS if served(b, "default", "tensor", "alibi", weights=True)]


@st.composite
def shapes(draw, square=False):
    B = draw(st.integers(1, 2))
    Hkv = draw(st.integers(1, 2))
    H = Hkv * draw(st.integers(1, 2))
    L = draw(st.integers(1, 7))
    S = L if square else draw(st.integers(1, 7))
    E = draw(st.integers(1, 5))
    Ev = draw(st.integers(1, 4))
    return B, H, Hkv, L, S, E, Ev


def _qkv(shape, seed, dtype=torch.float64):
    B, H, Hkv, L, S, E, Ev = shape
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(B, H, L, E, generator=g, dtype=dtype) * 2,
        torch.randn(B, Hkv, S, E, generator=g, dtype=dtype) * 2,
        torch.randn(B, Hkv, S, Ev, generator=g, dtype=dtype),
    )


def _require_served(backend, q, k, v, **kw):
    """Fails (never skips) when ``backend`` declines a call the coverage table says it serves."""
    why = registry.get(backend).supports(make_call(q, k, v, **kw))
    assert why is None, f"{backend} declines a case tests/backends/_backend_coverage.py says it serves: {why}"


@settings(max_examples=300)
@given(shape=shapes(), seed=st.integers(0, 2**31 - 1), p_keep=st.sampled_from([0.0, 0.2, 0.6, 1.0]), biased=st.booleans(),
       backend=st.sampled_from(WEIGHT_BACKENDS))
def test_rows_sum_to_one_and_masked_weights_are_exactly_zero(shape, seed, p_keep, biased, backend):
    q, k, v = _qkv(shape, seed)
    B, H, _, L, S, _, _ = shape
    g = torch.Generator().manual_seed(seed + 1)
    allowed = torch.rand(B, H, L, S, generator=g) < p_keep
    bias = Bi.ALiBi(H) if biased else None
    _require_served(backend, q, k, v, mask=allowed, bias=bias, return_weights=True)
    res = attnkit.attention(q, k, v, mask=allowed, bias=bias, return_weights=True, backend=backend)
    w = res.weights
    assert torch.isfinite(w).all() and torch.isfinite(res.out).all()
    assert (w[~allowed] == 0).all()
    has_key = allowed.any(-1)
    sums = w.sum(-1)
    torch.testing.assert_close(sums[has_key], torch.ones_like(sums[has_key]), rtol=0, atol=1e-12)
    assert (sums[~has_key] == 0).all() and (res.out[~has_key] == 0).all()
    assert res.report.fully_masked_rows == int((~has_key).sum())


@settings(max_examples=200)
@given(shape=shapes(), seed=st.integers(0, 2**31 - 1), backend=st.sampled_from(BACKENDS), score=st.sampled_from([None, "dot", "cosine"]))
def test_permutation_equivariance(shape, seed, backend, score):
    q, k, v = _qkv(shape, seed)
    g = torch.Generator().manual_seed(seed)
    pq, pk = torch.randperm(shape[3], generator=g), torch.randperm(shape[4], generator=g)
    _require_served(backend, q, k, v, score=score)
    out = attnkit.attention(q, k, v, score=score, backend=backend).out
    permuted = attnkit.attention(q[:, :, pq], k[:, :, pk], v[:, :, pk], score=score, backend=backend).out
    torch.testing.assert_close(permuted, out[:, :, pq], rtol=0, atol=1e-12)


@settings(max_examples=200)
@given(shape=shapes(square=True), seed=st.integers(0, 2**31 - 1), backend=st.sampled_from(BACKENDS),
       extra=st.sampled_from(["none", "alibi", "window"]), data=st.data())
def test_causal_prefix_invariance(shape, seed, backend, extra, data):
    q, k, v = _qkv(shape, seed)
    L = shape[3]
    t = data.draw(st.integers(0, L - 1))
    mask = M.causal() & M.sliding_window(left=2, right=0) if extra == "window" else M.causal()
    bias = Bi.ALiBi(shape[1]) if extra == "alibi" else None
    _require_served(backend, q, k, v, mask=mask, bias=bias)
    q2, k2, v2 = _qkv(shape, seed + 1)
    q2[:, :, :t], k2[:, :, :t], v2[:, :, :t] = q[:, :, :t], k[:, :, :t], v[:, :, :t]  # same prefix, new future
    a = attnkit.attention(q, k, v, mask=mask, bias=bias, backend=backend).out
    b = attnkit.attention(q2, k2, v2, mask=mask, bias=bias, backend=backend).out
    torch.testing.assert_close(b[:, :, :t], a[:, :, :t], rtol=0, atol=1e-13)
    if t < L:
        assert not torch.allclose(b[:, :, t:], a[:, :, t:])  # the check can fail: the future did change


def test_prefix_invariance_check_fails_without_a_mask():
    """Sanity: without the causal mask, changing a later token does change earlier outputs."""
    q, k, v = _qkv((1, 1, 1, 4, 4, 3, 2), 0)
    k2 = k.clone()
    k2[:, :, 3] += 1
    assert not torch.allclose(attnkit.attention(q, k, v).out[:, :, :3], attnkit.attention(q, k2, v).out[:, :, :3])
