"""varlen_attention (packed variable-length batches) against a per-sequence float64 oracle.

The oracle is written here from the definition, independent of attnkit: for each sequence alone,
scores = q k^T * scale (+ ALiBi), masked by index comparisons with bottom-right alignment (query j
of a sequence with L queries and S keys sits at key position j + S - L), softmax, @ v; a row with
no allowed key is zeros; with sinks, one more logit per head with a zero value. Forward and
gradients are compared in float64 (to 1e-12) and in float32 (to a small multiple of what the same
oracle makes of float32 inputs: the tolerance is the reference's own error in that dtype).
"""

from __future__ import annotations

import math

import pytest
import torch

import attnkit
from attnkit import biases as Bi
from attnkit import masks as M
from attnkit.core import varlen as varlen_mod
from attnkit.core.varlen import varlen_attention

LENGTHS = [5, 1, 0, 13, 5, 7, 1, 20]  # odd lengths, a zero-length sequence, repeats (grouped calls)


def cu(lengths):
    return torch.tensor([0, *lengths]).cumsum(0)


def oracle_one(q, k, v, *, causal=False, window=None, prefix=None, alibi=None, sinks=None):
    """One sequence: q (L, H, E), k (S, Hkv, E), v (S, Hkv, Ev) → (L, H, Ev), from the definition."""
    L, H, E = q.shape
    S, Hkv, _ = k.shape
    if L == 0 or S == 0:  # no rows, or rows that see no key: zeros
        return q.new_zeros((L, H, v.shape[-1]))
    g = H // Hkv
    kk, vv = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)  # query head h reads kv head h // g
    s = torch.einsum("lhe,she->hls", q, kk) / math.sqrt(E)  # (H, L, S)
    pos_q = torch.arange(L)[:, None] + (S - L)  # bottom-right: query j sits at key position j + S - L
    pos_k = torch.arange(S)[None, :]
    allowed = torch.ones(L, S, dtype=torch.bool)
    if causal:
        allowed &= pos_k <= pos_q
    if window is not None:
        allowed &= pos_k >= pos_q - window
    if prefix is not None:  # prefix-LM: the sequence's own first `prefix` keys are visible to every query
        allowed |= pos_k < prefix
    if alibi is not None:
        s = s - alibi[:, None, None] * (pos_q - pos_k).abs()
    s = s.masked_fill(~allowed, float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks[:, None, None].expand(H, L, 1).to(s.dtype)], dim=-1)
    m = s.amax(-1, keepdim=True).clamp(min=torch.finfo(s.dtype).min)  # a fully masked row keeps -inf → 0 weights
    w = torch.exp(s - m)
    w = w / w.sum(-1, keepdim=True).clamp(min=torch.finfo(s.dtype).tiny)
    if sinks is not None:
        w = w[..., :S]
    w = torch.where(allowed, w, torch.zeros_like(w))
    return torch.einsum("hls,she->lhe", w, vv)


def oracle(q, k, v, lq, lk, **kw):
    cq, ck = cu(lq).tolist(), cu(lk).tolist()
    return torch.cat([oracle_one(q[cq[i]:cq[i + 1]], k[ck[i]:ck[i + 1]], v[ck[i]:ck[i + 1]], **kw) for i in range(len(lq))])


def inputs(lq, lk, H=4, Hkv=2, E=8, Ev=6, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(sum(lq), H, E, generator=g, dtype=dtype, requires_grad=True)
    k = torch.randn(sum(lk), Hkv, E, generator=g, dtype=dtype, requires_grad=True)
    v = torch.randn(sum(lk), Hkv, Ev, generator=g, dtype=dtype, requires_grad=True)
    return q, k, v


def grads(out, tensors, seed=1):
    go = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=out.dtype)
    return torch.autograd.grad(out, tensors, go, allow_unused=True)


CASES = {
    "plain": dict(lq=LENGTHS, lk=LENGTHS, mask=None, oracle={}),
    "causal": dict(lq=LENGTHS, lk=LENGTHS, mask=M.causal(), oracle={"causal": True}),
    "window": dict(lq=LENGTHS, lk=LENGTHS, mask=M.sliding_window(left=3), oracle={"causal": True, "window": 3}),
    # absolute key positions: the prefix is the first 3 keys of each sequence (positions restart)
    "prefix_lm": dict(lq=LENGTHS, lk=LENGTHS, mask=M.prefix_lm(3), oracle={"causal": True, "prefix": 3}),
    # cached prefix: L_i < S_i, the new queries are the last L_i positions; a sequence with keys but no
    # queries, and one with queries but no keys (its rows are zeros)
    "cached_prefix": dict(lq=[3, 1, 0, 4, 2], lk=[7, 5, 4, 4, 0], mask=M.causal(), oracle={"causal": True}),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("backend", ["auto", "reference", "blockwise"])
def test_matches_per_sequence_oracle_float64(case, backend):
    c = CASES[case]
    q, k, v = inputs(c["lq"], c["lk"])
    res = varlen_attention(q, k, v, cu(c["lq"]), cu(c["lk"]), mask=c["mask"], backend=backend)
    ref = oracle(q, k, v, c["lq"], c["lk"], **c["oracle"])
    assert res.out.shape == ref.shape
    torch.testing.assert_close(res.out, ref, rtol=0, atol=1e-12)
    for got, want in zip(grads(res.out, (q, k, v)), grads(ref, (q, k, v))):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("case", ["causal", "cached_prefix"])
def test_float32_error_is_the_references_own(case):
    """float32 varlen vs the float64 oracle, within a few times the float32 oracle's own error."""
    c = CASES[case]
    q, k, v = inputs(c["lq"], c["lk"])
    exact = oracle(q, k, v, c["lq"], c["lk"], **c["oracle"])
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    ref32 = oracle(q32, k32, v32, c["lq"], c["lk"], **c["oracle"])
    got = varlen_attention(q32, k32, v32, cu(c["lq"]), cu(c["lk"]), mask=c["mask"]).out
    ref_err = (ref32.double() - exact).abs().max().item()
    assert (got.double() - exact).abs().max().item() <= 4 * ref_err + 1e-7
    g_exact = grads(exact, (q, k, v))
    for got_g, ref_g, ex in zip(grads(got, (q32, k32, v32)), grads(ref32, (q32, k32, v32)), g_exact):
        ref_gerr = (ref_g.double() - ex).abs().max().item()
        assert (got_g.double() - ex).abs().max().item() <= 4 * ref_gerr + 1e-6


def test_alibi_positions_restart_per_sequence():
    lq = [6, 3, 9]
    q, k, v = inputs(lq, lq, H=4, Hkv=4)
    alibi = Bi.ALiBi(4).double()
    res = varlen_attention(q, k, v, cu(lq), mask=M.causal(), bias=alibi)
    ref = oracle(q, k, v, lq, lq, causal=True, alibi=alibi.slopes.double())
    torch.testing.assert_close(res.out, ref, rtol=0, atol=1e-12)


def test_t5_bias_equals_each_sequence_alone():
    """A learned T5 bias sees positions 0..L_i-1 in every sequence: equal to running each one alone."""
    lq = [4, 11, 4]
    q, k, v = inputs(lq, lq, H=4, Hkv=4)
    t5 = Bi.T5RelativeBias(4, bidirectional=False).double()
    with torch.no_grad():
        for p in t5.parameters():
            p.normal_()  # a zero-initialised table would hide wrong positions
    res = varlen_attention(q, k, v, cu(lq), mask=M.causal(), bias=t5, backend="reference")
    c = cu(lq).tolist()
    alone = torch.cat([
        attnkit.attention(*(t[c[i]:c[i + 1]].transpose(0, 1)[None] for t in (q, k, v)), mask=M.causal(), bias=t5, backend="reference").out[0].transpose(0, 1)
        for i in range(len(lq))
    ])
    torch.testing.assert_close(res.out, alone, rtol=0, atol=1e-12)
    g_res = torch.autograd.grad(res.out.sum(), list(t5.parameters()))
    g_alone = torch.autograd.grad(alone.sum(), list(t5.parameters()))
    for a, b in zip(g_res, g_alone):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_sinks_match_oracle_with_gradients():
    q, k, v = inputs(LENGTHS, LENGTHS)
    sinks = torch.tensor([0.5, -1.0, 2.0, 0.0], dtype=torch.float64, requires_grad=True)
    res = varlen_attention(q, k, v, cu(LENGTHS), mask=M.causal(), sinks=sinks)
    ref = oracle(q, k, v, LENGTHS, LENGTHS, causal=True, sinks=sinks)
    torch.testing.assert_close(res.out, ref, rtol=0, atol=1e-12)
    for got, want in zip(grads(res.out, (q, k, v, sinks)), grads(ref, (q, k, v, sinks))):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_no_call_spans_two_sequences(monkeypatch):
    """Every attention call is a batch of whole sequences of one (L_i, S_i): no tile mixes two sequences,
    and equal lengths share one call."""
    seen = []
    real = varlen_mod.attention

    def spy(q, k, v, **kw):
        seen.append((q.shape[0], q.shape[2], k.shape[2]))
        return real(q, k, v, **kw)

    monkeypatch.setattr(varlen_mod, "attention", spy)
    lq, lk = [3, 5, 3, 0, 5, 2], [4, 5, 4, 2, 5, 0]
    q, k, v = inputs(lq, lk)
    varlen_attention(q, k, v, cu(lq), cu(lk), mask=M.causal())
    assert sorted(seen) == sorted([(2, 3, 4), (2, 5, 5)])


def test_report_and_lse():
    q, k, v = inputs(LENGTHS, LENGTHS)
    res = varlen_attention(q, k, v, cu(LENGTHS), mask=M.causal(), backend="reference")
    assert res.report.backend == "reference"
    assert "varlen: 8 sequences" in res.report.reason
    assert res.lse.shape == (sum(LENGTHS), 4)
    c = cu(LENGTHS).tolist()
    s0 = torch.einsum("lhe,she->hls", q[:5], k[:5].repeat_interleave(2, 1)) / math.sqrt(8)
    s0 = s0.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(res.lse[c[0]:c[1]], s0.logsumexp(-1).T, rtol=0, atol=1e-12)


def test_all_sequences_empty_and_keyless():
    q, k, v = inputs([0, 0], [3, 1])
    res = varlen_attention(q, k, v, cu([0, 0]), cu([3, 1]))
    assert res.out.shape == (0, 4, 6)
    q, k, v = inputs([2, 3], [0, 0])
    res = varlen_attention(q, k, v, cu([2, 3]), cu([0, 0]))
    assert res.out.shape == (5, 4, 6) and not res.out.any()
    res.out.sum().backward()  # still in the graph, like attention()'s empty outputs


def test_top_level_export():
    assert attnkit.varlen_attention is varlen_attention


# ---- bad input ---------------------------------------------------------------------------------
def _qkv():
    return inputs([3, 4], [3, 4])


@pytest.mark.parametrize(
    "cu_q, match",
    [
        (torch.tensor([1, 3, 7]), "must start at 0"),
        (torch.tensor([0, 5, 3, 7]), "non-decreasing"),
        (torch.tensor([0, 3, 6]), "must end at total_q"),
        (torch.tensor([0, 3, 9]), "must end at total_q"),
        (torch.tensor([7]), "N \\+ 1 >= 2"),
        (torch.tensor([[0, 3, 7]]), "must be 1-D"),
    ],
)
def test_bad_cu_seqlens_values(cu_q, match):
    q, k, v = _qkv()
    with pytest.raises(ValueError, match=match):
        varlen_attention(q, k, v, cu_q)


def test_bad_cu_seqlens_types():
    q, k, v = _qkv()
    with pytest.raises(TypeError, match="int32 or int64"):
        varlen_attention(q, k, v, torch.tensor([0.0, 3.0, 7.0]))
    with pytest.raises(TypeError, match="1-D int32/int64 torch.Tensor"):
        varlen_attention(q, k, v, [0, 3, 7])


def test_bad_shapes_and_counts():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="3 dims"):
        varlen_attention(q[None], k, v, cu([3, 4]))
    with pytest.raises(ValueError, match="same number of sequences"):
        varlen_attention(q, k, v, cu([3, 4]), cu([1, 2, 4]))
    with pytest.raises(ValueError, match="pass cu_seqlens_k"):
        varlen_attention(q, k[:5], v[:5], cu([3, 4]))
    with pytest.raises(ValueError, match="total_k"):
        varlen_attention(q, k, v, cu([3, 4]), cu([3, 3]))


def test_padded_batch_masks_and_biases_refused():
    q, k, v = _qkv()
    with pytest.raises(TypeError, match="mask object applied per sequence"):
        varlen_attention(q, k, v, cu([3, 4]), mask=torch.ones(7, 7, dtype=torch.bool))
    with pytest.raises(ValueError, match="padded rows"):
        varlen_attention(q, k, v, cu([3, 4]), mask=M.from_attention_mask(torch.ones(2, 4)))
    with pytest.raises(TypeError, match="dense tensor bias"):
        varlen_attention(q, k, v, cu([3, 4]), bias=torch.zeros(4, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="shape \\(H,\\)"):
        varlen_attention(q, k, v, cu([3, 4]), sinks=torch.zeros(1, 4, 1, dtype=torch.float64))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_error_is_the_references_own():
    """On a GPU (its kernels, the offsets on the device): the float64 oracle's distance, as on the CPU."""
    q, k, v = inputs(LENGTHS, LENGTHS)
    exact = oracle(q, k, v, LENGTHS, LENGTHS, causal=True)
    ref32 = oracle(*(t.detach().float() for t in (q, k, v)), LENGTHS, LENGTHS, causal=True)
    ref_err = (ref32.double() - exact).abs().max().item()
    qc, kc, vc = (t.detach().float().cuda().requires_grad_() for t in (q, k, v))
    got = varlen_attention(qc, kc, vc, cu(LENGTHS).to(torch.int32).cuda(), mask=M.causal()).out
    assert (got.double().cpu() - exact).abs().max().item() <= 8 * ref_err + 1e-6
    got.sum().backward()
    assert qc.grad.shape == q.shape and bool(torch.isfinite(qc.grad).all())


def test_similar_lengths_share_a_padded_call_only_under_causal_masks(monkeypatch):
    """Under a causal mask a real query never sees the padding keys after its sequence, so sequences of
    similar length share one call; without a mask they would see them, so every length runs alone."""
    seen = []
    real = varlen_mod.attention

    def spy(q, k, v, **kw):
        seen.append((q.shape[0], q.shape[2], k.shape[2]))
        return real(q, k, v, **kw)

    monkeypatch.setattr(varlen_mod, "attention", spy)
    lengths = [3, 5, 4, 30]
    q, k, v = inputs(lengths, lengths)
    res = varlen_attention(q, k, v, cu(lengths), mask=M.causal())
    assert sorted(seen) == [(1, 30, 30), (3, 5, 5)]
    torch.testing.assert_close(res.out, oracle(q, k, v, lengths, lengths, causal=True), rtol=0, atol=1e-12)
    seen.clear()
    res = varlen_attention(q, k, v, cu(lengths))
    assert sorted(seen) == [(1, 3, 3), (1, 4, 4), (1, 5, 5), (1, 30, 30)]
    torch.testing.assert_close(res.out, oracle(q, k, v, lengths, lengths), rtol=0, atol=1e-12)
