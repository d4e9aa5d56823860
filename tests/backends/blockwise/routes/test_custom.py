"""Additive biases on the blockwise backend's fused kernel per query block and key chunk
(:mod:`attnkit.backends.blockwise.routes.custom`) against a float64 oracle.

The oracle is the ``reference`` backend on float64 copies of the inputs (bias and mask applied
densely). The flash-attention rule: the route's float32 result may be off the oracle by at most a
few times the ``reference`` backend's own float32 error on the same inputs. Small blocks and key
chunks are forced, so every call is split into many query blocks and every row into several
chunks merged by log-sum-exp (and short last ones), as an 8k call is. Every case checks the report,
so a silent fall back to the tile loop fails the test.
"""

from __future__ import annotations

import pytest
import torch

import attnkit
from _fused_bias_cases import errors, inputs, mask_of
from attnkit import biases
from attnkit import masks as M
from attnkit.backends.blockwise import estimate as blockwise_estimate
from attnkit.backends.blockwise.kernel import gate as fused_gate
from attnkit.backends.blockwise.routes import custom as fused_custom
from attnkit.core.call import make_call

ROUTE = fused_custom.CUSTOM.name
TILE_LOOP = "Python tile loop"


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(fused_custom, "BLOCK", 12)  # query blocks and tiles of 12: a short last one
    monkeypatch.setattr(fused_custom, "CHUNK_ELEMS", 1)  # one tile of keys per kernel call: many merges
    fused_custom._CACHE.clear()
    yield
    fused_custom._CACHE.clear()


def _bias(name, B, H, L, S):
    if name == "log_distance":  # the benchmark's: depends on the head only
        slopes = torch.linspace(0.05, 0.5, H)
        return biases.custom_bias(lambda b, h, q, kv: -slopes[h] * torch.log1p((q - kv).abs().float()), depends_on=("h",))
    if name == "bhqk":  # reads every index, and a captured per-batch tensor
        w = torch.randn(B, generator=torch.Generator().manual_seed(7))
        return biases.custom_bias(lambda b, h, q, kv: torch.sin(0.3 * q - 0.17 * kv + h) * w[b] + 0.01 * q)
    if name == "no_dims":
        return biases.custom_bias(lambda b, h, q, kv: 0.05 * (q - kv).float(), depends_on=())
    if name == "head_only":  # broadcasts over queries and keys: (1, H, 1, 1)
        return biases.custom_bias(lambda b, h, q, kv: 0.3 * h.float() - 0.2, depends_on=("h",))
    if name == "dense":
        return torch.randn(B, H, L, S, generator=torch.Generator().manual_seed(5))
    if name == "alibi_documents":
        return biases.ALiBi(H)
    raise ValueError(name)


def _errors(q, k, v, bias, mask):
    return errors(q, k, v, bias, mask, lse_atol=1e-4)


SHAPES = [(2, 4, 2, 45, 45, 16), (1, 4, 4, 19, 50, 8), (2, 6, 3, 50, 23, 16)]  # GQA; L < S; L > S


@pytest.mark.parametrize("shape", SHAPES, ids=["gqa_square", "L<S", "L>S_gqa"])
@pytest.mark.parametrize("mask", ["none", "causal", "causal_top_left", "window", "padding", "document"])
@pytest.mark.parametrize("bias", ["log_distance", "bhqk", "no_dims", "head_only", "dense", "alibi_documents"])
def test_matches_the_float64_oracle(bias, mask, shape):
    B, H, Hkv, L, S, E = shape
    if bias == "alibi_documents" and mask in ("none", "causal", "causal_top_left", "window"):
        pytest.skip("a relative bias under a mask of key - query only takes the relative route")
    q, k, v = inputs(B, H, Hkv, L, S, E)
    err, err32, res = _errors(q, k, v, _bias(bias, B, H, L, S), mask_of(mask, B, L, S))
    assert res.report.reason.endswith(ROUTE), res.report.reason
    assert err <= 3 * err32 + 1e-6, (err, err32)


def test_default_block_and_chunk_sizes(monkeypatch):
    monkeypatch.undo()  # the real BLOCK and CHUNK_ELEMS: 600 rows span three blocks and several chunks
    monkeypatch.setattr(fused_custom, "CHUNK_ELEMS", 1 << 16)
    q, k, v = inputs(1, 2, 2, 600, 600, 16)
    for mask in (None, M.causal()):
        err, err32, res = _errors(q, k, v, _bias("log_distance", 1, 2, 600, 600), mask)
        assert res.report.reason.endswith(ROUTE)
        assert err <= 3 * err32 + 1e-6, (err, err32)


def test_strided_inputs():
    B, H, L, S, E = 2, 4, 30, 40, 8
    base = torch.randn(B, L, H, 2 * E, generator=torch.Generator().manual_seed(1))
    q = base[..., ::2].transpose(1, 2)  # (B, H, L, E): head dim of stride 2, heads and rows swapped
    kb = torch.randn(B, S, H, E, generator=torch.Generator().manual_seed(2))
    k, v = kb.transpose(1, 2), kb.transpose(1, 2).flip(2)
    bias = _bias("bhqk", B, H, L, S)
    err, err32, res = _errors(q, k, v, bias, M.causal())
    assert res.report.reason.endswith(ROUTE)
    assert err <= 3 * err32 + 1e-6, (err, err32)


def test_fully_masked_rows_are_zero_with_lse_minus_inf():
    q, k, v = inputs(1, 2, 2, 30, 12, 8)
    res = attnkit.attention(q, k, v, bias=_bias("log_distance", 1, 2, 30, 12), mask=M.causal(), backend="blockwise")
    assert res.report.reason.endswith(ROUTE)  # rows 0..17 see nothing
    assert torch.equal(res.out[:, :, :18], torch.zeros_like(res.out[:, :, :18]))
    assert torch.isneginf(res.lse[:, :, :18]).all() and torch.isfinite(res.lse[:, :, 18:]).all()
    assert res.report.fully_masked_rows == 2 * 18


def test_a_bias_that_is_minus_inf_in_places():
    # -inf on a band of keys (a row empty in some chunks, not in others), and on whole rows of head 1
    def fn(b, h, q, kv):
        out = 0.1 * (q - kv).float() + 0 * h
        out = out.masked_fill((kv >= 10) & (kv < 30), float("-inf"))
        return out.masked_fill((h == 1) & (q % 7 == 3), float("-inf"))

    bias = biases.custom_bias(fn, depends_on=("h",))
    q, k, v = inputs(1, 3, 3, 40, 45, 8)
    for mask in (None, M.causal(), M.sliding_window(5, 0)):
        err, err32, res = _errors(q, k, v, bias, mask)
        assert res.report.reason.endswith(ROUTE)
        assert err <= 3 * err32 + 1e-6, (err, err32)
        assert torch.isneginf(res.lse[0, 1, 3::7]).all() and (res.out[0, 1, 3::7] == 0).all()


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nan_and_inf_bias_values_behave_as_the_tile_loop(bad):
    def fn(b, h, q, kv):
        out = torch.cos(0.2 * (q - kv).float()) + 0 * h
        return out.masked_fill((q == 5) & (kv == 3) | (q == 20) & (kv == 33), bad)  # (20, 33): hidden by causal

    bias = biases.custom_bias(fn, depends_on=("h",))
    q, k, v = inputs(1, 2, 2, 30, 40, 8)
    res = attnkit.attention(q, k, v, bias=bias, mask=M.causal(), backend="blockwise")
    assert res.report.reason.endswith(ROUTE)
    with fused_gate.enabled(False):
        loop = attnkit.attention(q, k, v, bias=bias, mask=M.causal(), backend="blockwise")
    assert TILE_LOOP in loop.report.reason
    assert torch.equal(torch.isnan(res.out), torch.isnan(loop.out)) and torch.isnan(res.out[:, :, 5]).all()
    ok = ~torch.isnan(loop.out)
    assert torch.allclose(res.out[ok], loop.out[ok], atol=1e-5)


def test_hostile_values_the_mask_hides_leave_the_route_and_never_leak():
    q, k, v = inputs(1, 2, 2, 30, 20, 8)
    bias = _bias("log_distance", 1, 2, 30, 20)
    clean = attnkit.attention(q, k, v, bias=bias, mask=M.causal(), backend="blockwise")
    q2 = q.clone()
    q2[:, :, :10] = 1e38  # rows 0..9 see no key
    res = attnkit.attention(q2, k, v, bias=bias, mask=M.causal(), backend="blockwise")
    assert ROUTE not in res.report.reason  # the tile loop, or the reference's exact path
    assert torch.equal(res.out[:, :, :10], torch.zeros_like(res.out[:, :, :10]))
    assert torch.allclose(res.out[:, :, 10:], clean.out[:, :, 10:], atol=1e-5)


def test_gradcheck_float64():
    q, k, v = (t.requires_grad_() for t in inputs(1, 2, 1, 9, 30, 4, dtype=torch.float64))
    bias = _bias("bhqk", 1, 2, 9, 30)
    fn = lambda q, k, v: attnkit.attention(q, k, v, bias=bias, mask=M.causal(), backend="blockwise").out  # noqa: E731
    assert attnkit.attention(q, k, v, bias=bias, mask=M.causal(), backend="blockwise").report.reason.endswith(ROUTE)
    torch.autograd.gradcheck(fn, (q, k, v))


def test_gradients_of_inputs_and_a_captured_tensor_match_the_reference():
    w = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    bias = biases.custom_bias(lambda b, h, q, kv: -w * (q - kv).abs().double().sqrt() + 0 * h, depends_on=("h",))
    mask = M.document(torch.arange(40) * 2 // 40)
    grads = []
    for backend in ("blockwise", "reference"):
        q, k, v = (t.requires_grad_() for t in inputs(1, 4, 2, 40, 40, 8, dtype=torch.float64))
        res = attnkit.attention(q, k, v, bias=bias, mask=mask, backend=backend)
        if backend == "blockwise":
            assert res.report.reason.endswith(ROUTE)
        res.out.square().sum().backward()
        grads.append([q.grad, k.grad, v.grad, w.grad.clone()])
        w.grad = None
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-9), (a - b).abs().max()


def test_calls_the_route_does_not_take_keep_the_tile_loop():
    q, k, v = inputs(1, 2, 2, 16, 16, 8)
    bias = _bias("log_distance", 1, 2, 16, 16)
    res = attnkit.attention(*(t.bfloat16() for t in (q, k, v)), bias=bias, backend="blockwise")
    assert TILE_LOOP in res.report.reason  # bf16 would round the bias in the kernel's mask
    with attnkit.options(block_q=8, block_kv=8):
        assert TILE_LOOP in attnkit.attention(q, k, v, bias=bias, backend="blockwise").report.reason
    per_head = M.custom(lambda b, h, i, j: (i >= j) | (h == 0), depends_on=("h",))
    assert TILE_LOOP in attnkit.attention(q, k, v, bias=bias, mask=per_head, backend="blockwise").report.reason
    mod = biases.score_mod(lambda s, b, h, i, j: 5 * torch.tanh(s / 5), depends_on=())
    assert TILE_LOOP in attnkit.attention(q, k, v, bias=mod, backend="blockwise").report.reason


def test_the_cost_model_names_the_route_and_auto_reports_it():
    q, k, v = inputs(1, 8, 8, 64, 64, 16)
    bias = _bias("log_distance", 1, 8, 64, 64)
    for mask in (None, M.causal(), M.document(torch.arange(64) // 20)):
        est = blockwise_estimate(make_call(q, k, v, bias=bias, mask=mask))
        assert est["path"] == ROUTE and est["time_s"] > 0, est
    with attnkit.options(block_q=8, block_kv=8):  # explicit tiles: the tile loop, and the estimate says so
        assert blockwise_estimate(make_call(q, k, v, bias=bias))["path"] == TILE_LOOP
    res = attnkit.attention(q, k, v, bias=bias, mask=M.causal(), backend="auto")
    if res.report.backend == "blockwise":  # auto may prefer SDPA with the dense bias at this size
        assert f"path: {ROUTE}" in res.report.reason and res.report.reason.endswith(ROUTE)


@pytest.mark.parametrize("mask", ["none", "causal", "document"])
def test_large_logits_merge_relative_to_a_row_shift(mask):
    # logits of several hundred: a float32 lse is off by ulp(1000) ~ 6e-5, which an unshifted merge of
    # the chunks would pass on to every weight; the float32 reference is exact to eps x the scores
    B, H, Hkv, L, S, E = 1, 4, 1, 40, 40, 8
    q, k, v = inputs(B, H, Hkv, L, S, E, seed=3)
    q, k = q * 12, k * 12
    bias = biases.custom_bias(lambda b, h, i, j: 0.05 * (i - j).float() + 0 * h, depends_on=("h",))
    err, err32, res = _errors(q, k, v, bias, mask_of(mask, B, L, S))
    assert res.report.reason.endswith(ROUTE)
    assert res.lse.abs().max() > 100  # the case is what it claims
    assert err <= 3 * err32 + 1e-6, (err, err32)


@pytest.mark.parametrize("mask", ["none", "padding"])
def test_a_later_chunk_that_outweighs_the_first_moves_the_row_shift(mask):
    # exact scores (halves of small integers, scale 1/2) plus a bias of 0 on the first chunk's keys and
    # 300 + (j mod 5) on the rest: the later chunks are alike in weight and outweigh the first by e^300.
    # A shift taken from the first chunk's lse leaves theirs near 300, each rounded to ulp(300) apart
    # in float32, an error their weights carry into the output; the float32 reference, with exact
    # scores, is exact to a few ulps (fuzz, 5-key chunks, seed 12 case 13153: out 3.7x its tolerance)
    B, H, Hkv, L, S, E = 1, 2, 1, 5, 40, 4
    g = torch.Generator().manual_seed(4)
    q, k = (torch.randint(-3, 4, (B, n_heads, n, E), generator=g).float() / 2 for n_heads, n in ((H, L), (Hkv, S)))
    v = torch.randn(B, Hkv, S, E, generator=g)
    bias = biases.custom_bias(lambda b, h, i, j: torch.where(j < 12, 0.0, 300.0 + (j % 5).float()) + 0 * h, depends_on=("h",))
    err, err32, res = _errors(q, k, v, bias, mask_of(mask, B, L, S))
    assert res.report.reason.endswith(ROUTE)
    assert res.lse.abs().max() > 300  # the case is what it claims
    assert err <= 3 * err32 + 1e-6, (err, err32)
