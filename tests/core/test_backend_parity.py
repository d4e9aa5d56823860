"""Every score × mask × bias on every exact backend that serves it agrees with ``reference``.

Tolerance follows flash-attention's tests: a backend's float32 error against the float64
reference must be at most ``FACTOR`` × the float32 reference's own error (plus a few-ulp floor for
cases where that error is 0 by luck). Gradients of q, k, v are held to the same rule. Backends come
from ``attnkit.available_backends()`` at collection time, so a newly registered backend
(``blockwise``) is tested without editing this file. Which cases each backend serves is pinned in
``tests/backends/_backend_coverage.py``: only those are generated, and a backend that declines one
of them through ``supports(call)`` fails with its reason (never a skip). Approximate backends are
left out.
"""

from __future__ import annotations

import contextlib
import itertools

import pytest
import torch

import attnkit
from _backend_coverage import served
from _core_cases import BIASES, MASKS, SCORES, SHAPES, exact_backends, make_qkv, max_err
from attnkit import masks as M
from attnkit.core import registry
from attnkit.core.call import make_call

FACTOR = 2.0
FLOOR = 2e-6

COMBOS = list(itertools.product(SHAPES, SCORES, MASKS, BIASES))


def _variants():
    """Backend names, plus ``blockwise@2x3``: the blockwise backend with 2-query × 3-key tiles, so
    the tiny shapes here cross tile boundaries (its default tiles cover them in one tile)."""
    names = exact_backends()
    if "blockwise" in names:
        names.append("blockwise@2x3")
    return names


@contextlib.contextmanager
def _tiles(backend):
    if "@" not in backend:
        yield backend
        return
    from attnkit.backends import blockwise

    name, tiles = backend.split("@")
    bq, bk = (int(x) for x in tiles.split("x"))
    blockwise.set_tile_sizes(bq, bk)
    try:
        yield name
    finally:
        blockwise.set_tile_sizes(None, None)


def _run(backend, shape, score, mask, bias, dtype, return_weights=False):
    q, k, v = make_qkv(shape, dtype, requires_grad=True)
    with _tiles(backend) as name:
        res = attnkit.attention(q, k, v, score=score, mask=mask, bias=bias, backend=name, return_weights=return_weights)
    g = torch.Generator().manual_seed(5)
    upstream = torch.randn(res.out.shape, generator=g, dtype=torch.float64).to(dtype)
    res.out.backward(upstream)
    return res, (q.grad, k.grad, v.grad)


def _is_square(shape_name):
    return SHAPES[shape_name][3] == SHAPES[shape_name][4]


def _declines(backend, q, k, v, **kw):
    """``supports``'s reason for declining a call, or None where the backend serves it."""
    return registry.get(backend.split("@")[0]).supports(make_call(q, k, v, **kw))


def _params():
    """(backend, *combo) for each case the coverage table says the backend serves. Every served
    combination runs on the GQA L < S shape; the square shape (where sdpa uses ``is_causal``) and
    the small-tile variant run on fewer scores (suite time)."""
    out = []
    for backend in _variants():
        for c in COMBOS:
            if not served(backend, *c[1:], square=_is_square(c[0])):
                continue
            if c[0] == "square" and c[1] not in ("default", "dot", "cosine"):
                continue
            if "@" in backend and (c[0] != "rect-gqa" or c[1] not in ("default", "general")):
                continue
            out.append(pytest.param(backend, *c, id="-".join(c) + "-" + backend))
    return out


@pytest.mark.parametrize("backend,shape_name,score_name,mask_name,bias_name", _params())
def test_backend_matches_reference(backend, shape_name, score_name, mask_name, bias_name):
    shape = SHAPES[shape_name]
    torch.manual_seed(0)
    score, mask, bias = SCORES[score_name](shape), MASKS[mask_name](shape), BIASES[bias_name](shape)
    q, k, v = make_qkv(shape)
    why = _declines(backend, q, k, v, score=score, mask=mask, bias=bias)
    assert why is None, f"{backend} declines a case the coverage table says it serves: {why}"

    ref64, g64 = _run("reference", shape, score, mask, bias, torch.float64)
    ref32, g32 = _run("reference", shape, score, mask, bias, torch.float32)
    got, ggot = _run(backend, shape, score, mask, bias, torch.float32)

    assert got.report.backend == backend.split("@")[0]
    assert got.out.dtype == torch.float32 and got.out.shape == ref64.out.shape
    assert torch.isfinite(got.out).all()
    tol = FACTOR * max_err(ref32.out, ref64.out) + FLOOR
    assert max_err(got.out, ref64.out) <= tol, f"out error {max_err(got.out, ref64.out):.3g} > {tol:.3g}"
    for name, a, r32, r64 in zip("qkv", ggot, g32, g64):
        tol = FACTOR * max_err(r32, r64) + FLOOR * max(1.0, r64.abs().max().item())
        assert torch.isfinite(a).all(), f"d{name} not finite"
        assert max_err(a, r64) <= tol, f"d{name} error {max_err(a, r64):.3g} > {tol:.3g}"
    assert got.report.fully_masked_rows == ref64.report.fully_masked_rows


def test_the_tolerance_can_fail():
    """The float32 tolerance is tight: a 1e-4 relative error, or a key dropped from one query, fails it."""
    shape = SHAPES["rect-gqa"]
    mask = MASKS["causal_br"](shape)
    ref64, _ = _run("reference", shape, None, mask, None, torch.float64)
    ref32, _ = _run("reference", shape, None, mask, None, torch.float32)
    tol = FACTOR * max_err(ref32.out, ref64.out) + FLOOR
    assert max_err(ref32.out * (1 + 1e-4), ref64.out) > tol
    off_by_one = MASKS["causal_tl"](shape) | M.sliding_window(left=None, right=1, align="top_left")
    wrong, _ = _run("reference", shape, None, off_by_one, None, torch.float32)
    assert max_err(wrong.out, ref64.out) > tol


@pytest.mark.parametrize("backend", [b for b in _variants() if served(b, "default", "none", "none", weights=True)])
@pytest.mark.parametrize("mask_name", list(MASKS))
def test_backend_weights_match_reference(backend, mask_name):
    """Backends that return weights (per the coverage table) return the reference's weights (rows
    of 0 where fully masked)."""
    shape = SHAPES["rect-gqa"]
    mask = MASKS[mask_name](shape)
    q, k, v = make_qkv(shape)
    why = _declines(backend, q, k, v, mask=mask, return_weights=True)
    assert why is None, f"{backend} declines weights the coverage table says it returns: {why}"
    ref64, _ = _run("reference", shape, None, mask, None, torch.float64, return_weights=True)
    ref32, _ = _run("reference", shape, None, mask, None, torch.float32, return_weights=True)
    got, _ = _run(backend, shape, None, mask, None, torch.float32, return_weights=True)
    tol = FACTOR * max_err(ref32.weights, ref64.weights) + FLOOR
    assert max_err(got.weights, ref64.weights) <= tol


def test_float64_backends_agree_tightly():
    """In float64 every exact backend matches the reference to ~1e-12 on a masked, biased GQA call."""
    shape = SHAPES["rect-gqa"]
    q, k, v = make_qkv(shape, torch.float64)
    # one bias: a list of float32 biases is summed in float32 by per-tile backends (blockwise) but
    # in the score dtype by the reference, a 1e-8 difference in float64 (reported, not fixed here)
    kw = dict(mask=MASKS["pad_left"](shape) & MASKS["causal_br"](shape), bias=BIASES["alibi"](shape))
    ref = attnkit.attention(q, k, v, backend="reference", **kw).out
    for name in exact_backends():  # every exact backend serves a padding & causal mask with ALiBi
        assert _declines(name, q, k, v, **kw) is None, f"{name} declines: {_declines(name, q, k, v, **kw)}"
        got = attnkit.attention(q, k, v, backend=name, **kw).out
        torch.testing.assert_close(got, ref, rtol=0, atol=1e-12, msg=lambda m: f"backend {name}: {m}")


hyp = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=300)
@given(
    B=st.integers(1, 2), Hkv=st.integers(1, 2), g=st.integers(1, 3), L=st.integers(1, 9), S=st.integers(1, 9),
    E=st.integers(1, 6), Ev=st.integers(1, 5),
    backend_bias=st.sampled_from([(b, n) for b in _variants() for n in BIASES if served(b, "default", "none", n)]),
    mask_name=st.sampled_from(list(MASKS)), score_name=st.sampled_from(["default", "dot", "cosine"]), seed=st.integers(0, 1000),
)
def test_random_shapes_agree_in_float64(B, Hkv, g, L, S, E, Ev, backend_bias, mask_name, score_name, seed):
    """Odd shapes (L or S = 1, E = 1, S < L, GQA 3:1) in float64: every backend equals the reference
    to 1e-10, on the biases the coverage table says it serves (the masks and scores here it serves all)."""
    backend, bias_name = backend_bias
    shape = (max(B, 2) if mask_name.startswith("pad") else B, Hkv * g, Hkv, L, S, E, Ev)
    torch.manual_seed(seed)
    mask, bias, score = MASKS[mask_name](shape), BIASES[bias_name](shape), SCORES[score_name](shape)
    q, k, v = make_qkv(shape, torch.float64, seed=seed)
    why = _declines(backend, q, k, v, score=score, mask=mask, bias=bias)
    assert why is None, f"{backend} declines a case the coverage table says it serves: {why}"
    ref = attnkit.attention(q, k, v, score=score, mask=mask, bias=bias, backend="reference")
    with _tiles(backend) as name:
        got = attnkit.attention(q, k, v, score=score, mask=mask, bias=bias, backend=name)
    tol = 1e-6 if bias_name == "alibi+tensor" else 1e-10  # float32 bias parts summed in float32 per tile (see above)
    assert max_err(got.out, ref.out) <= tol
    assert got.report.fully_masked_rows == ref.report.fully_masked_rows
