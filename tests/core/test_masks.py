"""Masks equal their position-by-position definitions (tests/numpy_reference.py), compose with
``&``, ``|``, ``~``, convert the Hugging Face and torch polarities, and answer tile queries
(empty / full / partial) exactly as the materialized mask does, on random tiles."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import numpy_reference as npr
from attnkit import masks as M
from attnkit.core.tiles import TileState

hyp = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def _dense(m, L, S, **kw):
    return m.materialize(L, S, **kw).numpy()


@pytest.mark.parametrize("L,S", [(3, 7), (7, 3), (5, 5), (1, 6)])
@pytest.mark.parametrize("align", ["top_left", "bottom_right"])
def test_causal_alignment(L, S, align):
    assert (_dense(M.causal(align), L, S)[0, 0] == npr.causal_mask(L, S, align)).all()


def test_causal_alignments_differ_only_when_L_ne_S():
    assert (_dense(M.causal("top_left"), 4, 4) == _dense(M.causal("bottom_right"), 4, 4)).all()
    tl, br = _dense(M.causal("top_left"), 1, 5)[0, 0, 0], _dense(M.causal("bottom_right"), 1, 5)[0, 0, 0]
    assert tl.tolist() == [True, False, False, False, False]  # SDPA's is_causal: the one query is position 0
    assert br.tolist() == [True] * 5  # decoding: the new query sees the whole cache


@pytest.mark.parametrize("left,right", [(2, 0), (0, 2), (1, 1), (None, 0), (3, None), (0, 0)])
@pytest.mark.parametrize("L,S", [(4, 9), (6, 6)])
def test_sliding_window(left, right, L, S):
    for align in ("top_left", "bottom_right"):
        got = _dense(M.sliding_window(left, right, align), L, S)[0, 0]
        assert (got == npr.sliding_window_mask(L, S, left, right, align)).all()


@pytest.mark.parametrize("side", ["left", "right"])
def test_padding_from_lengths(side):
    lengths = [5, 0, 2]
    got = _dense(M.padding_mask(torch.tensor(lengths), 5, side=side), 3, 5)
    assert got.shape == (3, 1, 3, 5)
    assert (got == np.broadcast_to(npr.padding_mask(lengths, 5, side), got.shape)).all()
    assert got[0].all() and not got[1].any()
    assert got[2, 0, 0].tolist() == ([True, True, False, False, False] if side == "right" else [False, False, False, True, True])


def test_hf_and_torch_converters_agree_with_lengths():
    lengths = torch.tensor([4, 2])
    hf = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]])  # Hugging Face: 1 = real token
    kpm = hf == 0  # torch.nn.MultiheadAttention: True = padding, ignore
    want = _dense(M.padding_mask(lengths, 5), 2, 5)
    assert (_dense(M.from_attention_mask(hf), 2, 5) == want).all()
    assert (_dense(M.from_attention_mask(hf.bool()), 2, 5) == want).all()
    assert (_dense(M.from_key_padding_mask(kpm), 2, 5) == want).all()


def test_document_ids_block_diagonal_and_per_batch():
    ids = torch.tensor([0, 0, 1, 1, 1, 2])
    got = _dense(M.document(ids), 6, 6)[0, 0]
    assert (got == npr.document_mask(ids.numpy(), ids.numpy())[0, 0]).all()
    batched = torch.tensor([[0, 0, 1, 1, 1, 2], [0, 1, 1, 1, 1, 1]])
    got = _dense(M.document(batched), 6, 6)
    assert got.shape == (2, 1, 6, 6) and (got == npr.document_mask(batched.numpy(), batched.numpy())).all()
    q_ids = torch.tensor([1, 2])  # cross: 2 queries over 6 keys
    assert (_dense(M.document(ids, q_ids), 2, 6)[0, 0] == npr.document_mask(q_ids.numpy(), ids.numpy())[0, 0]).all()


@pytest.mark.parametrize("L,S,prefix", [(6, 6, 3), (3, 8, 2), (5, 5, 0)])
def test_prefix_lm(L, S, prefix):
    assert (_dense(M.prefix_lm(prefix), L, S)[0, 0] == npr.prefix_lm_mask(L, S, prefix)).all()


def test_prefix_lm_per_batch_lengths():
    got = _dense(M.prefix_lm(torch.tensor([1, 4])), 5, 5)
    for b, p in enumerate([1, 4]):
        assert (got[b, 0] == npr.prefix_lm_mask(5, 5, p)).all()


def test_custom_predicate_sees_b_h_q_kv():
    m = M.custom(lambda b, h, q, kv: (b + h + q + kv) % 3 == 0)
    got = _dense(m, 4, 5, batch=2, heads=3)
    b, h, i, j = np.meshgrid(range(2), range(3), range(4), range(5), indexing="ij")
    assert got.shape == (2, 3, 4, 5) and (got == ((b + h + i + j) % 3 == 0)).all()


def test_and_or_not_are_elementwise():
    a, c = M.causal(), M.sliding_window(left=1, right=1)
    A, C = _dense(a, 5, 7), _dense(c, 5, 7)
    assert ((_dense(a & c, 5, 7)) == (A & C)).all()
    assert ((_dense(a | c, 5, 7)) == (A | C)).all()
    assert ((_dense(~a, 5, 7)) == ~A).all()
    assert ((_dense(~(a & ~c), 5, 7)) == ~(A & ~C)).all()


def test_tensor_and_callable_are_accepted_where_masks_are():
    t = torch.rand(5, 7) > 0.5
    assert (_dense(M.causal() & t, 5, 7) == (_dense(M.causal(), 5, 7) & t.numpy())).all()
    f = lambda b, h, q, kv: kv != q  # noqa: E731
    assert (_dense(M.causal() & f, 5, 7)[0, 0] == (npr.causal_mask(5, 7) & (np.arange(7)[None] != np.arange(5)[:, None]))).all()


def test_materialize_shape_is_no_bigger_than_needed():
    assert M.causal().materialize(3, 4).shape == (1, 1, 3, 4)
    assert M.causal().materialize(3, 4, batch=2, heads=5).shape == (1, 1, 3, 4)
    assert M.padding_mask(torch.tensor([1, 2]), 4).materialize(3, 4, heads=5).shape == (2, 1, 3, 4)
    assert M.custom(lambda b, h, q, kv: q >= kv, depends_on=()).materialize(3, 4, batch=2, heads=5).shape == (1, 1, 3, 4)


# tile states: property test against the materialized mask ----------------------------------------
def _mask_zoo(L, S, seed):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, S + 1, (2,), generator=g)
    ids = torch.sort(torch.randint(0, 3, (S,), generator=g)).values
    return {
        "causal_br": M.causal(),
        "causal_tl": M.causal("top_left"),
        "window": M.sliding_window(left=2, right=1),
        "window_left_open": M.sliding_window(left=None, right=1, align="top_left"),
        "pad": M.padding_mask(lengths, S),
        "pad_left": M.padding_mask(lengths, S, side="left"),
        "prefix": M.prefix_lm(2),
        "prefix_b": M.prefix_lm(torch.tensor([1, 3])),
        "document": M.document(ids, ids[:L] if L <= S else None) if L <= S else M.causal(),
        "and_partial": M.causal() & ~M.causal(),  # partial & partial can be empty
        "window_and_causal": M.sliding_window(left=1, right=None) & M.causal("top_left"),
        "or": M.sliding_window(left=0, right=0) | M.prefix_lm(1),
        "not": ~M.sliding_window(left=1, right=1),
        "custom": M.custom(lambda b, h, q, kv: (q * 3 + kv) % 4 != 0, depends_on=()),
        "tensor": torch.rand(2, 1, L, S, generator=g) > 0.3,
    }


NAMES = list(_mask_zoo(4, 4, 0))


@settings(max_examples=600)
@given(
    name=st.sampled_from(NAMES),
    L=st.integers(1, 9),
    S=st.integers(1, 9),
    data=st.data(),
)
def test_tile_state_agrees_with_materialized_mask(name, L, S, data):
    m = M.as_mask(_mask_zoo(L, S, data.draw(st.integers(0, 3)))[name])
    q0 = data.draw(st.integers(0, L - 1))
    q1 = data.draw(st.integers(q0 + 1, L))
    k0 = data.draw(st.integers(0, S - 1))
    k1 = data.draw(st.integers(k0 + 1, S))
    dense = m.materialize(L, S, batch=2, heads=2)[:, :, q0:q1, k0:k1]
    want = TileState.FULL if bool(dense.all()) else TileState.EMPTY if not bool(dense.any()) else TileState.PARTIAL
    assert m.tile_state((q0, q1), (k0, k1), L, S, batch=2, heads=2) is want
    tile = m.evaluate((q0, q1), (k0, k1), L, S, batch=2, heads=2)
    assert (tile.expand_as(dense) == dense).all()


def test_materialize_defaults_to_the_sizes_a_tensor_mask_holds():
    """A per-head tensor mask materialized without ``heads=`` returns every head, not head 0 alone."""
    t = torch.rand(2, 4, 3, 5, generator=torch.Generator().manual_seed(0)) > 0.5
    assert torch.equal(M.as_mask(t).materialize(3, 5), t)
    assert torch.equal((M.causal() & t).materialize(3, 5), t & M.causal().materialize(3, 5))
    assert torch.equal((~M.as_mask(t)).materialize(3, 5), ~t)
