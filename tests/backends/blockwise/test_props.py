"""Blockwise internals and contracts: tile maps never lie, float64 gradcheck through the custom
backward on multi-tile shapes, dropout determinism and its exact formula, bad arguments."""

from __future__ import annotations

import pytest
import torch

import attnkit
from _backend_cases import MASKS, make_qkv, tiles
from attnkit import biases as Bi
from attnkit import masks as M
from attnkit import scores as Sc
from attnkit.backends import blockwise, tiling
from attnkit.core.call import make_call

SHAPE = (2, 4, 2, 37, 45, 16, 12)
EXTRA_MASKS = {
    "window_tl": lambda s: M.sliding_window(4, 9, align="top_left"),
    "left_unbounded": lambda s: M.sliding_window(None, 3),
    "doc_per_batch": lambda s: M.document(torch.tensor([[0] * 20 + [1] * 25, [0] * 5 + [2] * 40]),
                                          torch.tensor([[0] * 17 + [1] * 20, [0] * 30 + [2] * 7])),
    "not_causal": lambda s: ~M.causal(),
    "prefix_tensor": lambda s: M.prefix_lm(torch.tensor([3, 20])),
}


@pytest.mark.parametrize("name", [n for n in MASKS if n != "none"] + list(EXTRA_MASKS))  # "none" has no tile map
@pytest.mark.parametrize("bq,bk", [(8, 16), (5, 7), (37, 45)])
def test_tile_map_is_conservative(name, bq, bk):
    B, H, Hkv, L, S, E, Ev = SHAPE
    mask = attnkit.core.masks.as_mask((MASKS.get(name) or EXTRA_MASKS[name])(SHAPE))
    codes = tiling.tile_map(mask, L, S, bq, bk)
    dense = mask.materialize(L, S, batch=B, heads=H)
    for qi in range(codes.shape[0]):
        for ki in range(codes.shape[1]):
            t = dense[..., qi * bq:(qi + 1) * bq, ki * bk:(ki + 1) * bk]
            c = int(codes[qi, ki])
            if c == tiling.EMPTY:
                assert not t.any(), (qi, ki)
            elif c == tiling.FULL:
                assert t.all(), (qi, ki)
    if name in ("causal_br", "window") and bq == 8:  # analytic masks must actually skip something
        assert (codes == tiling.EMPTY).any()


def test_analytic_document_tiles_skip():
    docs = torch.arange(64) // 16
    codes = tiling.tile_map(M.document(docs), 64, 64, 8, 8)
    assert int((codes == tiling.EMPTY).sum()) == 64 - 16 and int((codes == tiling.FULL).sum()) == 16


@pytest.mark.parametrize(
    "mask,bias,score",
    [
        (M.causal(), None, None),
        (M.padding_mask(torch.tensor([5, 0]), 9) & M.sliding_window(2, 1), "alibi", None),
        (M.prefix_lm(3), "t5", None),
        (M.causal(), "softcap", None),
        (None, None, "additive"),
        (M.causal(), "shaw", "cosine"),
    ],
)
def test_gradcheck_float64_multi_tile(mask, bias, score):
    B, H, Hkv, L, S, E, Ev = 2, 4, 2, 7, 9, 3, 2
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, L, E, dtype=torch.float64, generator=g, requires_grad=True)
    k = torch.randn(B, Hkv, S, E, dtype=torch.float64, generator=g, requires_grad=True)
    v = torch.randn(B, Hkv, S, Ev, dtype=torch.float64, generator=g, requires_grad=True)
    extra = []
    if bias == "alibi":
        bias = Bi.ALiBi(H)
    elif bias == "t5":
        bias = Bi.T5RelativeBias(H, num_buckets=4, max_distance=4, dtype=torch.float64)
        extra.append(bias.table)
    elif bias == "shaw":
        bias = Bi.RelativePositionBias(H, max_distance=2, dtype=torch.float64)
        extra.append(bias.table)
    elif bias == "softcap":
        bias = Bi.score_mod(lambda s, b, h, qi, kv: 1.5 * torch.tanh(s / 1.5), depends_on=())
    if score == "additive":
        score = Sc.AdditiveScore(E, 4, dtype=torch.float64)
        extra += [score.w_q.weight, score.v.weight]
    elif score == "cosine":
        score = Sc.CosineScore(3.0).double()
        extra.append(score.log_tau)
    for t in extra:
        with torch.no_grad():
            t.normal_(generator=g)

    def f(q, k, v, *params):
        with tiles(3, 4):  # 3 × 3 tiles: ragged edges, skipped, full and partial ones
            res = attnkit.attention(q, k, v, mask=mask, bias=bias, score=score, backend="blockwise")
        return res.out, torch.where(torch.isfinite(res.lse), res.lse, 0.0)

    assert torch.autograd.gradcheck(f, (q, k, v, *extra))


def test_gradcheck_with_dropout_fixed_seed():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, n, 3, dtype=torch.float64, generator=g, requires_grad=True) for n in (6, 7, 7))

    def f(q, k, v):
        with tiles(2, 3):
            return blockwise.blockwise_attention(make_call(q, k, v, mask=M.causal(), dropout_p=0.3), seed=123).out

    assert torch.autograd.gradcheck(f, (q, k, v))


def test_dropout_is_deterministic_and_matches_its_formula():
    q, k, v = make_qkv(1, 2, 2, 20, 20, 8, 8)
    call = make_call(q, k, v, mask=M.causal(), dropout_p=0.25)
    with tiles(8, 8):
        a = blockwise.blockwise_attention(call, seed=7).out
        b = blockwise.blockwise_attention(call, seed=7).out
        c = blockwise.blockwise_attention(call, seed=8).out
        torch.manual_seed(5)
        d = attnkit.attention(q, k, v, mask=M.causal(), dropout_p=0.25, backend="blockwise").out
        torch.manual_seed(5)
        e = attnkit.attention(q, k, v, mask=M.causal(), dropout_p=0.25, backend="blockwise").out
    assert torch.equal(a, b) and not torch.equal(a, c) and torch.equal(d, e)
    # rebuild the same keep-mask tile by tile and apply it to the reference weights
    weights = attnkit.attention(q, k, v, mask=M.causal(), backend="reference", return_weights=True).weights
    keep = torch.zeros_like(weights, dtype=torch.bool)
    for qi in range(3):
        for ki in range(3):
            gen = torch.Generator().manual_seed((7 * 1_000_003 + qi * 3 + ki) % (2**63 - 1))
            lq, lk = min(8, 20 - 8 * qi), min(8, 20 - 8 * ki)
            keep[..., qi * 8:qi * 8 + lq, ki * 8:ki * 8 + lk] = torch.rand((1, 2, lq, lk), generator=gen) >= 0.25
    want = (weights * keep / 0.75) @ v
    assert torch.allclose(a, want, atol=1e-12)
    assert 0.6 < keep.double().mean().item() < 0.9  # about 1 - p kept


def test_tile_sizes_and_errors():
    with pytest.raises(ValueError, match="block_q"):
        tiling.set_tile_sizes(0, 8)
    q, k, v = make_qkv(1, 2, 2, 10, 10, 4, 4)
    with pytest.raises(ValueError, match="block_kv"):
        blockwise.blockwise_attention(make_call(q, k, v), block_kv=-1)
    assert tiling.default_tiles(M.sliding_window(255, 0), 16384, 16384, torch.float32, torch.device("cpu")) == (128, 128)
    assert tiling.default_tiles(None, 100, 16384, torch.float32, torch.device("cpu")) == (100, 512)


def test_no_LxS_tensor_is_held():
    """The report lists nothing materialized; the saved tensors for backward are O(n)."""
    q, k, v = (t.requires_grad_() for t in make_qkv(1, 2, 2, 300, 300, 8, 8, dtype=torch.float32))
    res = attnkit.attention(q, k, v, mask=M.sliding_window(31, 0), bias=Bi.ALiBi(2), backend="blockwise")
    assert res.report.materialized == []
    saved = [t for t in res.out.grad_fn.saved_tensors if isinstance(t, torch.Tensor)]
    assert max(t.numel() for t in saved) <= 2 * 300 * 8
