"""attention_rollout against hand-computed matrices; head_importance on toy functions."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.inspect.rollout import HEAD_FUSIONS, attention_rollout, head_importance


def test_rollout_hand_computed_three_tokens_two_layers():
    # Layer 1: heads average to [[1,0,0],[.5,.5,0],[.4,.2,.4]] -> Â1 = [[1,0,0],[.25,.75,0],[.2,.1,.7]]
    l1 = torch.tensor([[[1.0, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]],
                       [[1.0, 0, 0], [0.5, 0.5, 0], [0.6, 0.1, 0.3]]], dtype=torch.float64)
    # Layer 2: heads average to [[1,0,0],[.2,.8,0],[.1,.1,.8]] -> Â2 = [[1,0,0],[.1,.9,0],[.05,.05,.9]]
    l2 = torch.tensor([[[1.0, 0, 0], [0.4, 0.6, 0], [0.0, 0.0, 1.0]],
                       [[1.0, 0, 0], [0.0, 1.0, 0], [0.2, 0.2, 0.6]]], dtype=torch.float64)
    # Â2 @ Â1, worked by hand:
    # row 1: .1*[1,0,0] + .9*[.25,.75,0]                       = [.325, .675, 0]
    # row 2: .05*[1,0,0] + .05*[.25,.75,0] + .9*[.2,.1,.7]      = [.2425, .1275, .63]
    expected = torch.tensor([[1.0, 0.0, 0.0], [0.325, 0.675, 0.0], [0.2425, 0.1275, 0.63]], dtype=torch.float64)
    got = attention_rollout([l1[None], l2[None]])
    assert got.shape == (1, 3, 3) and got.dtype == torch.float64
    torch.testing.assert_close(got[0], expected, atol=1e-12, rtol=0)
    # Only the last layer, from start_layer=1: Â2 itself.
    torch.testing.assert_close(
        attention_rollout([l1[None], l2[None]], start_layer=1)[0],
        torch.tensor([[1.0, 0, 0], [0.1, 0.9, 0], [0.05, 0.05, 0.9]], dtype=torch.float64),
    )


def test_rollout_max_fusion_renormalises_rows():
    heads = torch.tensor([[[0.9, 0.1], [0.3, 0.7]], [[0.2, 0.8], [0.6, 0.4]]], dtype=torch.float64)
    # max = [[.9,.8],[.6,.7]]; .5*max + .5*I = [[.95,.4],[.3,.85]], row sums 1.35 and 1.15.
    expected = torch.tensor([[19 / 27, 8 / 27], [6 / 23, 17 / 23]], dtype=torch.float64)
    torch.testing.assert_close(attention_rollout([heads[None]], head_fusion="max")[0], expected)
    # min = [[.2,.1],[.3,.4]]; .5*min + .5*I = [[.6,.05],[.15,.7]] -> /.65 and /.85
    expected_min = torch.tensor([[12 / 13, 1 / 13], [3 / 17, 14 / 17]], dtype=torch.float64)
    torch.testing.assert_close(attention_rollout([heads[None]], head_fusion="min")[0], expected_min)


def np_rollout(layers, r):
    out = np.eye(layers[0].shape[-1])
    for a in layers:
        m = (1 - r) * a.mean(0) + r * np.eye(a.shape[-1])
        m = m / m.sum(-1, keepdims=True)
        out = m @ out
    return out


@settings(max_examples=20, deadline=None)
@given(
    L=st.integers(1, 6),
    n_layers=st.integers(1, 4),
    r=st.floats(0.0, 1.0),
    fusion=st.sampled_from(HEAD_FUSIONS),
    seed=st.integers(0, 10_000),
)
def test_rollout_rows_sum_to_one(L, n_layers, r, fusion, seed):
    g = torch.Generator().manual_seed(seed)
    layers = [torch.randn(2, 3, L, L, generator=g).mul(3).softmax(-1) for _ in range(n_layers)]
    out = attention_rollout(layers, head_fusion=fusion, residual_weight=r)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.sum(-1), torch.ones(2, L), atol=1e-5, rtol=0)
    assert (out >= 0).all()
    if fusion == "mean":
        ref = np_rollout([a[1].double().numpy() for a in layers], r)
        np.testing.assert_allclose(out[1].numpy(), ref, atol=1e-5)


def masked_attention(L, real, seed, leak=0.0):
    """(1, H, L, L) softmax weights of random scores with padded keys masked (or leaking `leak`)."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(1, 2, L, L, generator=g, dtype=torch.float64)
    fill = -math.inf if leak == 0 else math.log(leak)
    return scores.masked_fill(~real[None, None, None, :], fill).softmax(-1)


def test_rollout_padding_matches_unpadded_sequence():
    L, n_real = 5, 3
    real = torch.tensor([True] * n_real + [False] * (L - n_real))
    layers_pad = [masked_attention(L, real, seed) for seed in range(3)]
    # The real block of each padded layer is exactly the unpadded sequence's attention.
    layers_short = [a[..., :n_real, :n_real] for a in layers_pad]
    full_mask = torch.stack([torch.ones(L, dtype=torch.bool), real])
    no_pad = torch.ones(L, dtype=torch.bool)
    batch = [torch.cat([masked_attention(L, no_pad, 10 + i), a]) for i, a in enumerate(layers_pad)]
    out = attention_rollout(batch, key_mask=full_mask)
    ref = attention_rollout(layers_short)[0]
    torch.testing.assert_close(out[1, :n_real, :n_real], ref, atol=1e-12, rtol=0)
    assert (out[1, :n_real, n_real:] == 0).all()  # no flow into padding
    torch.testing.assert_close(out[1, n_real:, n_real:], torch.eye(L - n_real, dtype=torch.float64))
    torch.testing.assert_close(out.sum(-1), torch.ones(2, L, dtype=torch.float64))
    # Sequence 0 has no padding: same as rolling it out alone.
    torch.testing.assert_close(out[0], attention_rollout([a[:1] for a in batch])[0])


def test_rollout_key_mask_removes_leaked_weight():
    L, real = 4, torch.tensor([True, True, True, False])
    leaky = [masked_attention(L, real, s, leak=1e-4) for s in range(2)]  # like a -1e4 additive mask
    out = attention_rollout(leaky, key_mask=real[None])
    assert (out[0, :3, 3] == 0).all()
    without = attention_rollout(leaky)
    assert (without[0, :3, 3] > 0).all()
    torch.testing.assert_close(out.sum(-1), torch.ones(1, L, dtype=torch.float64))


def test_rollout_zero_residual_and_fully_masked_rows_stay_stochastic():
    a = torch.zeros(1, 1, 3, 3)
    a[0, 0, 0] = torch.tensor([0.5, 0.5, 0.0])  # rows 1 and 2 fully masked (all zero)
    out = attention_rollout([a], residual_weight=0.0)
    torch.testing.assert_close(out[0], torch.tensor([[0.5, 0.5, 0.0], [0, 1.0, 0], [0, 0, 1.0]]))


@pytest.mark.parametrize(
    "kwargs, exc, words",
    [
        (dict(head_fusion="median"), ValueError, ["head_fusion", "mean, max, min", "median"]),
        (dict(residual_weight=1.5), ValueError, ["residual_weight", "[0, 1]"]),
        (dict(start_layer=2), ValueError, ["start_layer", "[0, 1)"]),
        (dict(key_mask=torch.ones(1, 3)), TypeError, ["key_mask", "bool"]),
        (dict(key_mask=torch.ones(1, 4, dtype=torch.bool)), ValueError, ["key_mask", "(1, 3)"]),
    ],
)
def test_rollout_bad_arguments(kwargs, exc, words):
    with pytest.raises(exc) as info:
        attention_rollout([torch.full((1, 2, 3, 3), 1 / 3)], **kwargs)
    for word in words:
        assert word in str(info.value)


def test_rollout_bad_attentions():
    with pytest.raises(ValueError, match="L == S"):
        attention_rollout([torch.rand(1, 2, 3, 4)])
    with pytest.raises(ValueError, match=r"\[weights\]"):
        attention_rollout(torch.rand(1, 2, 3, 3))
    with pytest.raises(ValueError, match="share B and L"):
        attention_rollout([torch.rand(1, 2, 3, 3), torch.rand(1, 2, 4, 4)])
    with pytest.raises(ValueError, match="non-empty"):
        attention_rollout([])


# ------------------------------------------------------------- head importance


def test_head_importance_scalar_loss_is_signed_change():
    cost = torch.tensor([[0.5, -0.25, 0.0], [2.0, 1.0, 3.0]])
    calls = []

    def run(mask):
        calls.append(mask.clone())
        return 10.0 + (cost * (1 - mask)).sum()  # masking head (l, h) adds cost[l, h] to the loss

    imp = head_importance(run, 2, 3)
    torch.testing.assert_close(imp, cost)
    assert len(calls) == 7 and (calls[0] == 1).all()
    assert all(int((m == 0).sum()) == 1 for m in calls[1:])
    assert calls[1][0, 0] == 0 and calls[-1][1, 2] == 0  # layer-major order


def test_head_importance_embedding_is_one_minus_cosine():
    g = torch.Generator().manual_seed(0)
    contrib = torch.randn(2, 2, 5, generator=g, dtype=torch.float64)  # each head adds a vector

    def run(mask):
        return (mask[..., None] * contrib).sum((0, 1)) + 1.0

    imp = head_importance(run, 2, 2)
    full = contrib.sum((0, 1)).numpy() + 1.0
    for layer in range(2):
        for head in range(2):
            abl = full - contrib[layer, head].numpy()
            cos = abl @ full / (np.linalg.norm(abl) * np.linalg.norm(full))
            assert imp[layer, head].item() == pytest.approx(1 - cos, abs=1e-12)
    assert imp.dtype == torch.float64


def test_head_importance_batched_embeddings_average_over_batch():
    vecs = torch.eye(3)

    def run(mask):  # batch of 2 embeddings; head 0 only feeds the first one
        return torch.stack([vecs[0] + mask[0, 0] * vecs[1], vecs[2].clone()])

    imp = head_importance(run, 1, 2)
    # first embedding: cos([1,0,0], [1,1,0]) = 1/sqrt(2); second unchanged -> mean
    torch.testing.assert_close(imp, torch.tensor([[(1 - 1 / math.sqrt(2)) / 2, 0.0]]))


def test_head_importance_errors():
    with pytest.raises(TypeError, match="run_fn"):
        head_importance(3, 1, 1)
    with pytest.raises(ValueError, match="num_heads"):
        head_importance(lambda m: m.sum(), 1, 0)
    with pytest.raises(ValueError, match="same shape"):
        head_importance(lambda m: m.flatten()[: int(m.sum())], 1, 2)
    with pytest.raises(TypeError, match="scalar loss"):
        head_importance(lambda m: object(), 1, 1)


def test_rollout_with_attention_sinks_drops_the_sink_share():
    """Weights of a call with sinks (rows summing to sigmoid(lse - sink) < 1): NumPy rollout over an
    explicit extra sink column whose zero value reaches no token, so its share is dropped."""
    import attnkit

    B, H, L, r = 1, 2, 5, 0.5
    g = torch.Generator().manual_seed(4)
    sinks = torch.tensor([1.5, -0.5], dtype=torch.float64)
    layers, ext = [], []
    for _ in range(2):
        q, k, v = (torch.randn(B, H, L, 4, generator=g, dtype=torch.float64) for _ in range(3))
        layers.append(attnkit.attention(q, k, v, sinks=sinks, return_weights=True, backend="reference").weights)
        s = (q @ k.transpose(-1, -2)).numpy() * 0.5  # scale 1/sqrt(4)
        full = np.concatenate([s, np.broadcast_to(sinks.numpy()[None, :, None, None], (B, H, L, 1))], -1)
        ext.append(np.exp(full) / np.exp(full).sum(-1, keepdims=True))  # (B, H, L, L + 1), sink last
    got = attention_rollout(layers, residual_weight=r).numpy()
    want = np.eye(L)[None]
    for a in ext:
        mixed = (1 - r) * a.mean(1) + r * np.concatenate([np.eye(L), np.zeros((L, 1))], -1)[None]
        to_tokens = mixed[..., :L]  # the sink column carries no token
        want = (to_tokens / to_tokens.sum(-1, keepdims=True)) @ want
    assert np.allclose(got, want, atol=1e-12)
    assert float(layers[0].sum(-1).max()) < 1.0
    # a layer that gives every row to the sink passes only the residual
    assert torch.equal(attention_rollout([torch.zeros(B, H, L, L, dtype=torch.float64)]), torch.eye(L, dtype=torch.float64)[None])
