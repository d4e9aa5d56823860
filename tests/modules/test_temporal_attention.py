"""``TemporalAttention``: weights over past steps sum to 1 (hypothesis, every score), equal an
independent NumPy computation of Luong's global attention (scaled dot, general, additive), ignore
invalid past steps, pass gradcheck in float64, and reject bad inputs with errors naming the argument."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import numpy_reference as ref
from attnkit.modules.temporal_attention import SCORE_NAMES, TemporalAttention

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=25)
@given(B=st.integers(1, 3), L=st.integers(1, 5), S=st.integers(1, 12), score=st.sampled_from(SCORE_NAMES))
def test_weights_over_past_steps_sum_to_one(B, L, S, score):
    torch.manual_seed(B * 100 + L * 10 + S)
    att = TemporalAttention(6, 5, attn_dim=4, score=score)
    out = att(torch.randn(B, L, 6), torch.randn(B, S, 5))
    assert out.context.shape == (B, L, 5) and out.weights.shape == (B, L, S)
    assert (out.weights >= 0).all()
    torch.testing.assert_close(out.weights.sum(-1), torch.ones(B, L), rtol=0, atol=1e-6)


@pytest.mark.parametrize("score", ["scaled_dot", "general", "additive"])
def test_matches_numpy_global_attention(score):
    torch.manual_seed(3)
    att = TemporalAttention(6, 5, attn_dim=4, score=score).double()
    query, states = torch.randn(2, 3, 6, dtype=torch.float64), torch.randn(2, 7, 5, dtype=torch.float64)
    got = att(query, states)
    qp = (query @ att.w_q.weight.T).detach().numpy()[:, None]  # (B, 1, L, E): projections done by hand
    kp = (states @ att.w_k.weight.T).detach().numpy()[:, None]
    params = {}
    if score == "general":
        params = {"W": att.score.weight.detach().numpy()}
    if score == "additive":
        s = att.score
        params = {"Wq": s.w_q.weight.detach().numpy(), "Wk": s.w_k.weight.detach().numpy(),
                  "bk": s.w_k.bias.detach().numpy(), "v": s.v.weight.detach().numpy()[0]}
    w = ref.masked_softmax(ref.scores(qp, kp, score, params=params))[:, 0]  # (B, L, S)
    ctx = w @ states.numpy()  # values are the unprojected states
    np.testing.assert_allclose(got.weights.detach().numpy(), w, rtol=0, atol=1e-10)
    np.testing.assert_allclose(got.context.detach().numpy(), ctx, rtol=0, atol=1e-10)


def test_invalid_past_steps_get_zero_weight():
    att = TemporalAttention(4, 4)
    states = torch.randn(2, 6, 4)
    valid = torch.tensor([[True] * 6, [True, True, True, False, False, False]])
    out = att(torch.randn(2, 3, 4), states, valid)
    assert (out.weights[1, :, 3:] == 0).all()
    torch.testing.assert_close(out.weights.sum(-1), torch.ones(2, 3))
    # the padded steps' values cannot reach the context
    states2 = states.clone()
    states2[1, 3:] = 1e3
    query = torch.randn(2, 3, 4)
    torch.testing.assert_close(att(query, states, valid).context, att(query, states2, valid).context)


def test_single_step_query_gives_vectors():
    att = TemporalAttention(4, 3)
    query, states = torch.randn(5, 4), torch.randn(5, 9, 3)
    out = att(query, states)
    assert out.context.shape == (5, 3) and out.weights.shape == (5, 9)
    # a (B, Dq) query is the (B, 1, Dq) query with its step dimension dropped, not another computation
    full = att(query[:, None], states)
    torch.testing.assert_close(out.context, full.context[:, 0], rtol=0, atol=0)
    torch.testing.assert_close(out.weights, full.weights[:, 0], rtol=0, atol=0)


@pytest.mark.parametrize("score", ["scaled_dot", "additive", "general", "cosine"])
def test_gradcheck_float64(score):
    torch.manual_seed(0)
    att = TemporalAttention(3, 4, attn_dim=3, score=score).double()
    q = torch.randn(2, 2, 3, dtype=torch.float64, requires_grad=True)
    s = torch.randn(2, 5, 4, dtype=torch.float64, requires_grad=True)
    params = [p for p in att.parameters() if p.requires_grad]
    # inputs by gradcheck; parameters by central differences on their first and last entries
    assert torch.autograd.gradcheck(lambda q, s: att(q, s).context, (q, s))
    assert torch.autograd.gradcheck(lambda q, s: att(q, s).weights, (q, s))
    loss = att(q, s).context.square().sum()
    grads = torch.autograd.grad(loss, params)
    eps = 1e-6
    for p, g in zip(params, grads):  # central differences on two entries of every parameter
        flat = p.detach().view(-1)
        for i in (0, flat.numel() - 1):
            old = flat[i].item()
            with torch.no_grad():
                flat[i] = old + eps
                up = att(q, s).context.square().sum().item()
                flat[i] = old - eps
                down = att(q, s).context.square().sum().item()
                flat[i] = old
            assert abs((up - down) / (2 * eps) - g.view(-1)[i].item()) < 1e-6


def test_bad_inputs_raise_clear_errors():
    att = TemporalAttention(4, 3)
    with pytest.raises(ValueError, match="query_dim=4"):
        att(torch.randn(2, 5, 7), torch.randn(2, 6, 3))
    with pytest.raises(ValueError, match=r"states must be \(B=2, S, Ds=3\)"):
        att(torch.randn(2, 5, 4), torch.randn(3, 6, 3))
    with pytest.raises(ValueError, match="states must have 3 dims"):
        att(torch.randn(2, 5, 4), torch.randn(6, 3))
    with pytest.raises(ValueError, match="valid must be a bool tensor"):
        att(torch.randn(2, 5, 4), torch.randn(2, 6, 3), torch.ones(2, 6))
    with pytest.raises(TypeError, match="query must be a torch.Tensor"):
        att([1.0], torch.randn(2, 6, 3))
    with pytest.raises(ValueError, match="score must be one of"):
        TemporalAttention(4, 3, score="bilinear")
    with pytest.raises(ValueError, match="query_dim must be a positive int"):
        TemporalAttention(0, 3)
