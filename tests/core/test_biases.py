"""Biases equal their papers' definitions (ALiBi slopes, T5 buckets, Shaw clipping), custom score
functions run, and every modifier evaluated on a tile equals the slice of its dense form."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import attnkit
import numpy_reference as npr
from _core_cases import make_qkv
from attnkit import biases as Bi

hyp = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32])
def test_alibi_slopes_follow_the_paper(n):
    got = Bi.alibi_slopes(n).double().numpy()
    np.testing.assert_allclose(got, npr.alibi_slopes(n), rtol=1e-6)
    assert len(got) == n and len(set(got.tolist())) == n and (got > 0).all() and (got < 1).all()


def test_alibi_slopes_known_values():
    # the paper, §3: "For models with 8 heads, our slopes are 1/2^1, 1/2^2, ..., 1/2^8"
    np.testing.assert_allclose(Bi.alibi_slopes(8).numpy(), [2.0 ** -i for i in range(1, 9)], rtol=1e-7)
    # 6 heads: the 4 power-of-two slopes 2^-2, 2^-4, 2^-6, 2^-8, then 2^-1, 2^-3 from the 8-head list
    np.testing.assert_allclose(Bi.alibi_slopes(6).numpy(), [2.0 ** -e for e in (2, 4, 6, 8, 1, 3)], rtol=1e-7)
    # 12 heads: 8 slopes 2^-1..2^-8, then the odd entries of the 16-head list 2^-0.5, 2^-1.5, ...
    want = [2.0 ** -i for i in range(1, 9)] + [2.0 ** -(0.5 + i) for i in range(4)]
    np.testing.assert_allclose(Bi.alibi_slopes(12).numpy(), want, rtol=1e-6)


@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
def test_alibi_dense_matches_definition(align):
    got = Bi.ALiBi(6, align=align).materialize(4, 7, heads=6).double().numpy()
    np.testing.assert_allclose(got, npr.alibi_bias(6, 4, 7, align=align), rtol=1e-6)


def test_alibi_is_the_papers_linear_penalty_under_causal_mask():
    """Causal ALiBi = softmax(q·k/√E − m·(i − j)) over j ≤ i, and ALiBi is invariant to adding a
    constant per row, so the symmetric |i − j| form gives the same causal output."""
    q, k, v = make_qkv((1, 4, 4, 6, 6, 8, 8), torch.float64)
    i, j = torch.arange(6)[:, None], torch.arange(6)[None, :]
    slopes = Bi.alibi_slopes(4).double().view(4, 1, 1)
    s = q @ k.transpose(-1, -2) / math.sqrt(8) - slopes * (i - j)
    want = torch.softmax(s.masked_fill(j > i, float("-inf")), -1) @ v
    got = attnkit.attention(q, k, v, mask=attnkit.masks.causal(), bias=Bi.ALiBi(4)).out
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (8, 16), (16, 20)])
def test_t5_buckets_match_independent_implementation(bidirectional, num_buckets, max_distance):
    rel = torch.arange(-300, 301)
    got = Bi.t5_bucket(rel, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    want = [npr.t5_relative_position_bucket(int(r), bidirectional, num_buckets, max_distance) for r in rel]
    assert got.tolist() == want
    assert int(got.min()) >= 0 and int(got.max()) < num_buckets


def test_t5_bias_dense_matches_definition():
    t5 = Bi.T5RelativeBias(3, num_buckets=8, max_distance=10, bidirectional=True)
    got = t5.materialize(5, 40, heads=3).detach().double().numpy()
    want = npr.t5_bias(t5.table.detach().numpy(), 5, 40, bidirectional=True, num_buckets=8, max_distance=10)
    np.testing.assert_allclose(got, want)


def test_shaw_clipping():
    sh = Bi.RelativePositionBias(2, max_distance=2)
    with torch.no_grad():
        sh.table.copy_(torch.arange(10.0).view(5, 2))
    got = sh.materialize(6, 6, heads=2).detach().double().numpy()
    np.testing.assert_allclose(got, npr.shaw_bias(sh.table.detach().numpy(), 6, 6, 2))
    row = got[0, 0, 5]  # last query, keys 0..5: distances -5..0 clipped to -2
    assert row.tolist() == [0.0, 0.0, 0.0, 0.0, 2.0, 4.0]


def test_custom_score_functions():
    q, k, v = make_qkv((1, 2, 2, 4, 5, 8, 3), torch.float64)
    cap = 0.5
    softcap = Bi.score_mod(lambda s, b, h, qi, kv: cap * torch.tanh(s / cap))
    s = q @ k.transpose(-1, -2) / math.sqrt(8)
    want = torch.softmax(cap * torch.tanh(s / cap), -1) @ v
    torch.testing.assert_close(attnkit.attention(q, k, v, bias=softcap).out, want, rtol=0, atol=1e-12)
    dist = Bi.custom_bias(lambda b, h, qi, kv: -(qi - kv).abs().double() * (h + 1), depends_on=("h",))
    i, j = torch.arange(4)[:, None], torch.arange(5)[None, :]
    want = torch.softmax(s - (i - j).abs() * torch.tensor([1.0, 2.0], dtype=torch.float64).view(2, 1, 1), -1) @ v
    torch.testing.assert_close(attnkit.attention(q, k, v, bias=dist).out, want, rtol=0, atol=1e-12)


def _modifiers():
    g = torch.Generator().manual_seed(1)
    t5 = Bi.T5RelativeBias(3, num_buckets=8, max_distance=12)
    sh = Bi.RelativePositionBias(3, max_distance=3, align="top_left")
    for m in (t5, sh):
        with torch.no_grad():
            m.table.normal_(generator=g)
    return {
        "alibi": Bi.ALiBi(3),
        "alibi_tl": Bi.ALiBi(3, align="top_left"),
        "t5": t5,
        "shaw": sh,
        "custom": Bi.custom_bias(lambda b, h, q, kv: torch.sin(b + 2.0 * h + q * kv)),
        "softcap": Bi.score_mod(lambda s, b, h, q, kv: 3 * torch.tanh(s / 3) + 0.1 * (q - kv)),
        "tensor": Bi.TensorBias(torch.randn(2, 3, 9, 9, generator=g)),
        "sum": Bi.as_modifier([Bi.ALiBi(3), torch.randn(9, 9, generator=g)]),
    }


@settings(max_examples=300)
@given(name=st.sampled_from(list(_modifiers())), L=st.integers(1, 9), S=st.integers(1, 9), data=st.data())
def test_modifier_on_a_tile_equals_the_dense_slice(name, L, S, data):
    mod = _modifiers()[name]
    if name in ("tensor", "sum"):
        L, S = 9, 9  # dense tensors are built for one (L, S)
    q0 = data.draw(st.integers(0, L - 1))
    q1 = data.draw(st.integers(q0 + 1, L))
    k0 = data.draw(st.integers(0, S - 1))
    k1 = data.draw(st.integers(k0 + 1, S))
    full = torch.randn(2, 3, L, S, dtype=torch.float64)
    dense = mod.apply(full, (0, L), (0, S), L, S)
    tile = mod.apply(full[:, :, q0:q1, k0:k1].clone(), (q0, q1), (k0, k1), L, S)
    torch.testing.assert_close(tile, dense[:, :, q0:q1, k0:k1], rtol=0, atol=0)
    if mod.additive:
        mat = mod.materialize(L, S, batch=2, heads=3, dtype=torch.float64)
        torch.testing.assert_close(dense, full + mat, rtol=0, atol=1e-12)


def test_learned_bias_tables_get_gradients():
    q, k, v = make_qkv((1, 2, 2, 4, 4, 8, 4))
    for mod in (Bi.T5RelativeBias(2, num_buckets=8), Bi.RelativePositionBias(2, max_distance=2)):
        for backend in ("reference", "sdpa"):
            mod.zero_grad()
            attnkit.attention(q, k, v, bias=mod, backend=backend).out.square().sum().backward()
            assert mod.table.grad is not None and mod.table.grad.abs().sum() > 0, (mod, backend)


def test_materialize_defaults_to_the_sizes_a_bias_was_built_for():
    """``ALiBi(6).materialize(L, S)`` has 6 heads (it once returned head 0 alone, silently)."""
    assert Bi.ALiBi(6).materialize(3, 5).shape == (1, 6, 3, 5)
    np.testing.assert_allclose(Bi.ALiBi(6).materialize(3, 5).double().numpy(), npr.alibi_bias(6, 3, 5), rtol=1e-6)
    t = torch.randn(2, 3, 4, 5)
    assert torch.equal(Bi.TensorBias(t).materialize(4, 5), t)
    assert Bi.as_modifier([Bi.ALiBi(3), torch.randn(4, 5)]).materialize(4, 5).shape == (1, 3, 4, 5)
