"""The blockwise backend's fused-kernel paths (dense, causal, banded windows, prefix-LM, tiles) against a float64 oracle.

The oracle is plain PyTorch in float64 (GQA by repeating kv heads, the mask materialized, fully
masked rows 0 / lse -inf). The flash-attention rule: a fused float32 result may be off the oracle
by at most twice the ``reference`` backend's own float32 error (same inputs) plus a tiny atol;
bf16 by at most twice SDPA's own bf16 error. In float64 the fused kernel runs too, so gradients
are compared with the oracle's autograd gradients at 1e-10 (gradcheck-style parity).
Every case checks the report, so a silent fall back to the tile loop fails the test.
"""

from __future__ import annotations

import pytest
import torch

import attnkit
from attnkit import masks as M
from attnkit.backends.blockwise import blockwise_attention
from attnkit.backends.blockwise.kernel import gate as fused_gate
from attnkit.core.call import make_call

MASKS = {
    "none": None,
    "causal": M.causal(),
    "causal_top_left": M.causal(align="top_left"),
    "window37": M.sliding_window(37, 0),
    "window20_9": M.sliding_window(20, 9),
    "window200_top_left": M.sliding_window(200, 5, align="top_left"),
    # tile states: document ids, prefix-LM, chunks, padding, and a mask with a gap (two segments
    # per query block, merged by lse)
    "document": "document",  # built per shape by _mask: ids cover L queries and S keys
    "prefix_lm": M.prefix_lm(60),
    "prefix_lm_top_left": M.prefix_lm(120, align="top_left"),
    "chunked": M.chunked(70),
    "sink_and_window": M.KeyPrefixMask(9) | M.sliding_window(40, 0),
    "window_left_unbounded": M.sliding_window(None, 3),
}


def _mask(name, L, S):
    m = MASKS[name]
    if m == "document":  # 7 documents, queries and keys cut in proportion (cross-attention for L != S)
        return M.document(torch.arange(S) * 7 // S, q_doc_ids=torch.arange(L) * 7 // L)
    return m
SHAPES = {  # (B, H, Hkv, L, S, E)
    "square_gqa": (2, 4, 2, 150, 150, 16),
    "l_lt_s_mqa": (1, 4, 1, 97, 203, 8),
    "l_gt_s": (1, 2, 2, 203, 97, 16),
}


def _oracle(q, k, v, mask, scale):
    """float64 attention: out (B, H, L, Ev), lse (B, H, L); fully masked rows give 0 and -inf."""
    g = q.shape[1] // k.shape[1]
    k, v = k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    s = (q.double() @ k.transpose(-1, -2)) * scale
    if mask is not None:
        allowed = mask.materialize(q.shape[2], k.shape[2])
        s = s.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - torch.where(torch.isneginf(lse), 0.0, lse).unsqueeze(-1))
    return p @ v, lse


def _inputs(shape, dtype, seed=0, strided=False):
    B, H, Hkv, L, S, E = shape
    g = torch.Generator().manual_seed(seed)
    if strided:  # q as a (B, L, H, E) transpose; k, v as every other channel of a wider tensor
        q = torch.randn(B, L, H, E, generator=g, dtype=torch.float64).to(dtype).transpose(1, 2)
        k = torch.randn(B, Hkv, S, 2 * E, generator=g, dtype=torch.float64).to(dtype)[..., ::2]
        v = torch.randn(B, Hkv, S, 2 * E, generator=g, dtype=torch.float64).to(dtype)[..., 1::2]
    else:
        q, k, v = (torch.randn(B, h, n, E, generator=g, dtype=torch.float64).to(dtype) for h, n in ((H, L), (Hkv, S), (Hkv, S)))
    dout = torch.randn(B, H, L, E, generator=g, dtype=torch.float64).to(dtype)
    return q, k, v, dout


def _fused(q, k, v, mask):
    """Run blockwise on leaves copied from q, k, v; return (output, its call's report path)."""
    q, k, v = (t.detach().clone() if t.is_contiguous() else t.detach() for t in (q, k, v))
    for t in (q, k, v):
        t.requires_grad_(True)
    res = blockwise_attention(make_call(q, k, v, mask=mask))
    return res, (q, k, v)


def _grads(out, leaves, dout):
    return torch.autograd.grad(out, leaves, dout.to(out.dtype))


def _err(a, b):
    return float((a.detach().double() - b.detach().double()).abs().nan_to_num().max()) if a.numel() else 0.0


def _truth(q, k, v, dout, mask):
    leaves = [t.detach().double().requires_grad_(True) for t in (q, k, v)]
    out, lse = _oracle(*leaves, mask, q.shape[-1] ** -0.5)
    return out.detach(), lse.detach(), torch.autograd.grad(out, leaves, dout.double())


@pytest.mark.parametrize("shape", list(SHAPES), ids=list(SHAPES))
@pytest.mark.parametrize("mask", list(MASKS), ids=list(MASKS))
def test_float64_forward_and_gradients_match_the_oracle(mask, shape):
    q, k, v, dout = _inputs(SHAPES[shape], torch.float64)
    m = _mask(mask, q.shape[2], k.shape[2])
    res, leaves = _fused(q, k, v, m)
    assert "fused kernel" in res.report.reason
    out, lse, grads = _truth(q, k, v, dout, m)
    assert _err(res.out, out) < 1e-12
    assert torch.equal(torch.isneginf(res.lse), torch.isneginf(lse))
    assert _err(torch.where(torch.isneginf(lse), 0, res.lse), torch.where(torch.isneginf(lse), 0, lse)) < 1e-12
    for g, t in zip(_grads(res.out, leaves, dout), grads):
        assert _err(g, t) < 1e-10


@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "strided"])
@pytest.mark.parametrize("shape", list(SHAPES), ids=list(SHAPES))
@pytest.mark.parametrize("mask", list(MASKS), ids=list(MASKS))
def test_float32_within_twice_the_reference_error(mask, shape, strided):
    q, k, v, dout = _inputs(SHAPES[shape], torch.float32, seed=1, strided=strided)
    m = _mask(mask, q.shape[2], k.shape[2])
    out, _, grads = _truth(q, k, v, dout, m)
    res, leaves = _fused(q, k, v, m)
    assert "fused kernel" in res.report.reason
    got = [res.out, *_grads(res.out, leaves, dout)]
    ref_leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    ref = attnkit.attention(*ref_leaves, mask=m, backend="reference").out
    ref_got = [ref, *_grads(ref, ref_leaves, dout)]
    for a, r, t in zip(got, ref_got, [out, *grads]):
        assert _err(a, t) <= 2 * _err(r, t) + 1e-6


@pytest.mark.parametrize("mask", ["none", "causal", "window37", "window20_9", "document", "prefix_lm", "sink_and_window"])
def test_bfloat16_within_twice_sdpas_own_error(mask):
    shape = (1, 4, 2, 300, 300, 64)
    q, k, v, dout = _inputs(shape, torch.bfloat16, seed=2)
    m = _mask(mask, 300, 300)
    out, _, grads = _truth(q, k, v, dout, m)
    res, leaves = _fused(q, k, v, m)
    assert "fused kernel" in res.report.reason and res.out.dtype == torch.bfloat16
    got = [res.out, *_grads(res.out, leaves, dout)]
    # SDPA in bf16 with the dense bool mask (kv heads repeated): the kernel's own precision
    sl = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    kk, vv = (t.repeat_interleave(2, 1) for t in sl[1:])
    dense = None if m is None else m.materialize(300, 300)  # (1, 1, L, S): SDPA's fused CPU kernel
    sd = torch.nn.functional.scaled_dot_product_attention(sl[0], kk, vv, attn_mask=dense)
    sd_got = [sd, *_grads(sd, sl, dout)]
    for a, r, t in zip(got, sd_got, [out, *grads]):
        assert _err(a, t) <= 2 * _err(r, t) + 1e-3


def test_fully_masked_rows_give_zeros_neginf_lse_and_zero_gradients():
    # bottom-right window with L > S: the first queries sit before key 0 and see nothing
    mask = M.sliding_window(10, 0)
    q, k, v, dout = _inputs((1, 2, 2, 150, 60, 8), torch.float32, seed=3)
    res, leaves = _fused(q, k, v, mask)
    assert "fused kernel" in res.report.reason
    empty = ~mask.materialize(150, 60)[0, 0].any(-1)
    assert int(empty.sum()) == 90 and res.report.fully_masked_rows == 2 * 90
    assert torch.equal(res.out[:, :, empty], torch.zeros_like(res.out[:, :, empty]))
    assert torch.isneginf(res.lse[:, :, empty]).all() and torch.isfinite(res.lse[:, :, ~empty]).all()
    dq, dk, dv = _grads(res.out, leaves, dout)
    assert torch.isfinite(dq).all() and torch.isfinite(dk).all() and torch.isfinite(dv).all()
    assert torch.equal(dq[:, :, empty], torch.zeros_like(dq[:, :, empty]))


@pytest.mark.parametrize("mask,j", [("causal_top_left", 180), ("window20_9", 0)])
def test_a_nan_key_no_query_may_see_does_not_leak(mask, j):
    # top-left causal with L < S: keys past the last query are never seen; the window with
    # bottom-right alignment and L < S starts far from key 0
    q, k, v, dout = _inputs((1, 2, 2, 60, 200, 8), torch.float32, seed=4)
    k[:, :, j], v[:, :, j] = float("nan"), float("nan")
    assert not MASKS[mask].materialize(60, 200)[..., j].any()
    res, leaves = _fused(q, k, v, MASKS[mask])
    assert "fused kernel" in res.report.reason
    assert torch.isfinite(res.out).all()
    assert all(torch.isfinite(g).all() for g in _grads(res.out, leaves, dout))


def test_a_nan_in_an_allowed_key_gives_the_reference_backends_result():
    mask = M.sliding_window(20, 0)
    q, k, v, _ = _inputs((1, 2, 2, 400, 400, 8), torch.float32, seed=5)
    k[:, :, 150] = float("nan")
    res, _ = _fused(q, k, v, mask)
    assert "non-finite inputs" in res.report.reason  # the kernel is not what defines NaN semantics
    ref = attnkit.attention(q, k, v, mask=mask, backend="reference").out
    assert torch.equal(res.out.isnan(), ref.isnan())
    sees = mask.materialize(400, 400)[0, 0, :, 150]
    assert res.out[:, :, sees].isnan().all() and _err(res.out, ref) < 1e-5


@pytest.mark.parametrize("mask", ["causal", "window20_9", "none"])
def test_a_gradient_into_lse_matches_the_oracle(mask):
    q, k, v, _ = _inputs((1, 2, 1, 70, 90, 8), torch.float64, seed=6)
    res, leaves = _fused(q, k, v, MASKS[mask])
    assert "fused kernel" in res.report.reason
    got = torch.autograd.grad(res.out.sum() + torch.where(torch.isneginf(res.lse), 0, res.lse).sum(), leaves)
    ol = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    out, lse = _oracle(*ol, MASKS[mask], 8 ** -0.5)
    want = torch.autograd.grad(out.sum() + torch.where(torch.isneginf(lse), 0, lse).sum(), ol)
    for a, b in zip(got, want):
        assert _err(a, b) < 1e-10


def test_non_serving_calls_take_the_tile_loop():
    q, k, v, _ = _inputs((1, 2, 2, 40, 40, 8), torch.float32)
    per_head = M.custom(lambda b, h, qi, ki: (ki <= qi + h))  # a head-dependent predicate
    assert "Python tile loop" in blockwise_attention(make_call(q, k, v, mask=per_head)).report.reason
    assert "Python tile loop" in blockwise_attention(make_call(q, k, v, mask=M.causal()), block_q=16).report.reason
    with attnkit.options(block_q=16):
        assert "Python tile loop" in blockwise_attention(make_call(q, k, v)).report.reason


@pytest.mark.parametrize("failure", ["mismatch", "raises"])
def test_a_failed_self_test_falls_back_to_the_tile_loop(monkeypatch, failure):
    def bad(dtype):
        if failure == "raises":
            raise RuntimeError("op changed")
        return False

    monkeypatch.setattr(fused_gate, "_RESULTS", {})
    monkeypatch.setattr(fused_gate, "_self_test", bad)
    q, k, v, _ = _inputs((1, 2, 2, 90, 90, 8), torch.float64, seed=7)
    res = blockwise_attention(make_call(q, k, v, mask=M.sliding_window(20, 0)))
    assert "Python tile loop" in res.report.reason
    assert fused_gate._RESULTS == {torch.float64: False}
    out, _ = _oracle(q, k, v, M.sliding_window(20, 0), 8 ** -0.5)
    assert _err(res.out, out) < 1e-12


def test_the_self_test_passes_here_and_the_switch_turns_the_kernel_off():
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        assert fused_gate._self_test(dtype)
    q, k, v, _ = _inputs((1, 2, 2, 50, 50, 8), torch.float32)
    with fused_gate.enabled(False):
        assert "Python tile loop" in blockwise_attention(make_call(q, k, v, mask=M.causal())).report.reason
    assert "fused kernel" in blockwise_attention(make_call(q, k, v, mask=M.causal())).report.reason
    with pytest.raises(TypeError, match="flag must be a bool"):
        fused_gate.set_enabled(1)


@pytest.mark.parametrize("context", [torch.no_grad, torch.inference_mode], ids=["no_grad", "inference_mode"])
def test_the_first_use_under_no_grad_still_passes_the_self_test(monkeypatch, context):
    # the self-test differentiates its float64 reference; a first call inside no_grad must not fail it
    monkeypatch.setattr(fused_gate, "_RESULTS", {})
    q, k, v, _ = _inputs((1, 2, 2, 60, 60, 8), torch.float32)
    with context():
        res = blockwise_attention(make_call(q, k, v, mask=M.sliding_window(20, 0)))
    assert "fused kernel" in res.report.reason and fused_gate._RESULTS == {torch.float32: True}


def test_double_backward_matches_the_tile_loop():
    # the backward op is not differentiable: create_graph=True re-runs the call on the tile loop
    q, k, v, _ = _inputs((1, 2, 1, 11, 13, 4), torch.float64, seed=8)
    leaves = [t.requires_grad_(True) for t in (q, k, v)]

    def second(fused):
        with fused_gate.enabled(fused):
            out = attnkit.attention(*leaves, mask=M.sliding_window(3, 1), backend="blockwise").out
            g = torch.autograd.grad((out ** 2).sum(), leaves, create_graph=True)
            return torch.autograd.grad(sum((x ** 2).sum() for x in g), leaves)

    try:
        want = second(False)
    except RuntimeError as e:  # no double backward in the tile loop: the fused path says the same, never a silent 0
        with pytest.raises(RuntimeError, match="double backward"):
            second(True)
        assert "double backward" in str(e)
        return
    for a, b in zip(second(True), want):
        assert _err(a, b) < 1e-10


@pytest.mark.parametrize("L,S", [(256, 1024), (96, 400)])
def test_a_cached_prefix_at_large_logits_merges_relative_to_a_row_shift(L, S):
    # exact scores (halves of integers up to 15, scale 1/2) put |lse| near 350: the prefix's and the
    # square's float32 lse are each rounded to ulp(350) ~ 3e-5, and where the two parts weigh alike
    # an unshifted merge gave 11-14x the float32 reference's error; relative to a row shift both lse
    # are small and exact to a few ulps (attnkit.backends.blockwise.kernel.merge.rows_to_shift)
    g = torch.Generator().manual_seed(5)
    q, k = (torch.randint(-30, 31, (1, 2, n, 4), generator=g).float() / 2 for n in (L, S))
    v = torch.randn(1, 2, S, 4, generator=g)
    res = attnkit.attention(q, k, v, mask=M.causal(), backend="blockwise")
    assert "prefix + is_causal square" in res.report.reason
    ref = attnkit.attention(q, k, v, mask=M.causal(), backend="reference")
    truth = attnkit.attention(q.double(), k.double(), v.double(), mask=M.causal(), backend="reference")
    assert truth.lse.abs().max() > 300  # the case is what it claims
    assert _err(res.out, truth.out) <= 2 * _err(ref.out, truth.out) + 1e-7
    fin = torch.isfinite(truth.lse)
    assert torch.allclose(res.lse.double()[fin], truth.lse[fin], rtol=0, atol=1e-4)
