"""Bahdanau and Luong attention layers equal their papers' formulas written out in NumPy (float64),
rows sum to 1 over real source tokens and are exactly 0 on padding (zeros, not NaN, for an empty
source), gradients pass gradcheck in float64, and bad inputs get one clear error each."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnkit.core.scores import AdditiveScore
from attnkit.modules.seq2seq_attention import BahdanauAttention, LuongAttention, Seq2SeqAttention, make_seq2seq_attention

B, S, D = 3, 6, 8
LENGTHS = [6, 4, 1]


def _inputs(T=None, dtype=torch.float64):
    g = torch.Generator().manual_seed(1)
    q = torch.randn(B, D, generator=g, dtype=dtype) if T is None else torch.randn(B, T, D, generator=g, dtype=dtype)
    mem = torch.randn(B, S, D, generator=g, dtype=dtype)
    valid = torch.arange(S)[None] < torch.tensor(LENGTHS)[:, None]
    return q, mem, valid


def _numpy_attention(q, mem, valid, score_fn):
    """Written from the papers: e_j = score(q, h_j); a = softmax over real j; c = Σ a_j h_j."""
    q, mem, valid = q.detach().numpy(), mem.detach().numpy(), valid.numpy()
    ctx, weights = np.zeros_like(q), np.zeros(q.shape[:-1] + (S,))
    for b in range(q.shape[0]):
        for t in np.ndindex(q.shape[1:-1]):
            e = np.array([score_fn(q[b][t], mem[b, j]) for j in range(S)])
            real = valid[b]
            if real.any():
                p = np.exp(e[real] - e[real].max())
                weights[b][t][real] = p / p.sum()
            ctx[b][t] = weights[b][t] @ mem[b]
    return ctx, weights


def _bahdanau_np(layer):
    Wq, Wk, bk, v = (p.detach().numpy() for p in (layer.score.w_q.weight, layer.score.w_k.weight, layer.score.w_k.bias, layer.score.v.weight[0]))
    return lambda s, h: v @ np.tanh(Wq @ s + Wk @ h + bk)  # Bahdanau et al. App. A.1.2


def _luong_np(layer):
    W = layer.score.weight.detach().numpy()
    return lambda s, h: layer.scale * (s @ W @ h)  # Luong et al. eq. (8), "general", times the layer's scale


@pytest.mark.parametrize("T", [None, 4])
@pytest.mark.parametrize("kind", ["bahdanau", "luong"])
def test_matches_paper_formula_in_numpy(kind, T):
    layer = make_seq2seq_attention(kind, D).double()
    q, mem, valid = _inputs(T)
    ctx, w = layer(q, mem, valid)
    want_ctx, want_w = _numpy_attention(q, mem, valid, _bahdanau_np(layer) if kind == "bahdanau" else _luong_np(layer))
    np.testing.assert_allclose(w.detach().numpy(), want_w, rtol=0, atol=1e-12)
    np.testing.assert_allclose(ctx.detach().numpy(), want_ctx, rtol=0, atol=1e-12)
    assert ctx.shape == q.shape and w.shape == q.shape[:-1] + (S,)


@pytest.mark.parametrize("kind", ["bahdanau", "luong"])
def test_rows_sum_to_one_over_real_tokens_and_zero_on_padding(kind):
    layer = make_seq2seq_attention(kind, D)
    q, mem, valid = _inputs(T=5, dtype=torch.float32)
    _, w = layer(q, mem, valid)
    torch.testing.assert_close(w.sum(-1), torch.ones(B, 5), rtol=0, atol=1e-6)
    assert bool((w.masked_select(~valid[:, None, :].expand_as(w)) == 0).all())


@pytest.mark.parametrize("kind", ["bahdanau", "luong"])
def test_padding_content_never_matters(kind):
    layer = make_seq2seq_attention(kind, D)
    q, mem, valid = _inputs(dtype=torch.float32)
    ctx, w = layer(q, mem, valid)
    noisy = torch.where(valid[..., None], mem, torch.randn_like(mem) * 100)
    ctx2, w2 = layer(q, noisy, valid)
    torch.testing.assert_close(ctx2, ctx, rtol=0, atol=0)
    torch.testing.assert_close(w2, w, rtol=0, atol=0)


def test_empty_source_gives_zero_row_not_nan():
    layer = BahdanauAttention(D)
    q, mem, _ = _inputs(dtype=torch.float32)
    valid = torch.zeros(B, S, dtype=torch.bool)
    ctx, w = layer(q, mem, valid)
    assert bool((w == 0).all()) and bool((ctx == 0).all())


@pytest.mark.parametrize("cls", [BahdanauAttention, LuongAttention])
def test_gradcheck_float64(cls):
    layer = cls(4).double()
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, dtype=torch.float64, generator=g, requires_grad=True)
    mem = torch.randn(2, 5, 4, dtype=torch.float64, generator=g, requires_grad=True)
    valid = torch.tensor([[True] * 5, [True, True, True, False, False]])
    assert torch.autograd.gradcheck(lambda a, b: layer(a, b, valid), (q, mem))


def test_query_order_of_each_paper():
    assert BahdanauAttention(D).queries_before_recurrence  # s_{t-1} queries, context feeds the recurrence
    assert not LuongAttention(D).queries_before_recurrence  # h_t queries after the recurrence


def test_parameter_counts_match_formulas():
    A = 5
    # additive: W_q (D→A, no bias) + U (D→A with bias) + v (A→1)
    assert sum(p.numel() for p in BahdanauAttention(D, A).parameters()) == D * A + (D * A + A) + A
    assert sum(p.numel() for p in LuongAttention(D).parameters()) == D * D  # W_a


def test_luong_scale_defaults_to_one_over_sqrt_dim_and_one_is_the_papers_score():
    assert LuongAttention(D).scale == pytest.approx(D ** -0.5)
    layer = LuongAttention(D, scale=1.0).double()
    q, mem, valid = _inputs(None)
    ctx, w = layer(q, mem, valid)
    want_ctx, want_w = _numpy_attention(q, mem, valid, lambda s, h: s @ layer.score.weight.detach().numpy() @ h)
    np.testing.assert_allclose(w.detach().numpy(), want_w, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="scale must be a positive number"):
        LuongAttention(D, scale=0.0)
    with pytest.raises(TypeError, match="scale must be a finite real number"):
        LuongAttention(D, scale="1")


def test_bad_inputs_get_clear_errors():
    layer = LuongAttention(D)
    q, mem, valid = _inputs(dtype=torch.float32)
    with pytest.raises(ValueError, match="attention must be one of"):
        make_seq2seq_attention("dot-product", D)
    assert make_seq2seq_attention("none", D) is None
    with pytest.raises(ValueError, match=r"memory \(B, S, D\) with D=8"):
        layer(q, mem[..., :4], valid)
    with pytest.raises(ValueError, match="valid must be a bool"):
        layer(q, mem, valid.long())
    with pytest.raises(ValueError, match="batch size"):
        layer(q[:2], mem, valid)
    with pytest.raises(TypeError, match="attnkit Score"):
        Seq2SeqAttention(D, "additive")
    with pytest.raises(ValueError, match="head_dim=8"):
        Seq2SeqAttention(4, AdditiveScore(D))


@pytest.mark.parametrize("attn_dim", [None, 5])
def test_bahdanau_keys_prepared_once_equal_the_per_step_formula(attn_dim):
    """The decoder projects U h_j + b once per source (prepare) and passes it at every step; that
    must equal the layer computing it itself, values and gradients (float64), with A != D too."""
    torch.manual_seed(0)
    layer = BahdanauAttention(D, attn_dim=attn_dim).double()
    q, mem, valid = _inputs()
    mem.requires_grad_(True)
    ctx_a, w_a = layer(q, mem, valid)
    grads_a = torch.autograd.grad(ctx_a.square().sum(), [mem, *layer.parameters()])
    ctx_b, w_b = layer(q, mem, valid, keys=layer.prepare(mem))
    grads_b = torch.autograd.grad(ctx_b.square().sum(), [mem, *layer.parameters()])
    torch.testing.assert_close(ctx_b, ctx_a, rtol=0, atol=1e-12)
    torch.testing.assert_close(w_b, w_a, rtol=0, atol=1e-12)
    for ga, gb in zip(grads_a, grads_b):
        torch.testing.assert_close(gb, ga, rtol=0, atol=1e-12)
    # the projected view shares the parent's v and registers nothing: the parameter count is the paper's
    assert sum(p.numel() for p in layer.parameters()) == D * (attn_dim or D) * 2 + (attn_dim or D) * 2
    with pytest.raises(ValueError, match="keys must be prepare"):
        layer(q, mem, valid, keys=layer.prepare(mem)[:, :2])


def test_additive_score_projected_form_equals_the_score():
    torch.manual_seed(1)
    sc = AdditiveScore(4, 3).double()
    q, k = torch.randn(2, 1, 5, 4, dtype=torch.float64), torch.randn(2, 1, 7, 4, dtype=torch.float64)
    torch.testing.assert_close(sc.projected()(sc.project_queries(q), sc.project_keys(k)), sc(q, k), rtol=0, atol=1e-13)
    assert sc.projected() is sc.projected()
    with pytest.raises(ValueError, match="A=3"):
        sc.projected().check_head_dim(4)
