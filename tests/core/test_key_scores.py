"""attention(..., return_key_scores=True): the weights' column sums, from the fused paths, in O(n) memory.

Each case compares against the dense float64 weights of the reference backend summed over query
rows (``weights.sum(-2)``), with a tolerance relative to float32's own error on the same call.
"""

from __future__ import annotations

import pytest
import torch

import attnkit
from attnkit.core import key_scores as KS
from attnkit.core import masks as M
from attnkit.core.biases import ALiBi


def _qkv(B, H, Hkv, L, S, E=16, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, h, n, E, generator=g, dtype=torch.float64).to(dtype) for h, n in ((H, L), (Hkv, S), (Hkv, S))]


def _dense_column_sums(q, k, v, **kw):
    res = attnkit.attention(q.double(), k.double(), v.double(), backend="reference", return_weights=True, **kw)
    return res.weights.sum(-2)  # (B, H, S)


CASES = {
    "plain": dict(),
    "causal": dict(mask=M.causal()),
    "window": dict(mask=M.sliding_window(left=7)),
    "padding": dict(mask=M.KeyPaddingMask(torch.tensor([[True] * 40 + [False] * 8, [True] * 48]))),
    "alibi+causal": dict(mask=M.causal(), bias=ALiBi(4)),
    "sinks": dict(mask=M.causal(), sinks=torch.tensor([0.5, -1.0, 2.0, 0.0])),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("backend", ["auto", "blockwise", "sdpa"])
@pytest.mark.parametrize("hkv", [4, 2])
def test_equals_dense_column_sums(name, backend, hkv):
    kw = CASES[name]
    if backend == "sdpa" and ("bias" in kw or "sinks" in kw):
        pytest.skip("sdpa does not take custom biases or sinks")
    q, k, v = _qkv(2, 4, hkv, 48, 48)
    ref = _dense_column_sums(q, k, v, **kw)
    res = attnkit.attention(q, k, v, backend=backend, return_key_scores=True, **kw)
    f32 = attnkit.attention(q, k, v, backend="reference", return_weights=True, **kw).weights.double().sum(-2)
    own = (f32 - ref).abs().max().item()  # float32's own error on this call
    assert res.key_scores.shape == (2, 4, 48)
    torch.testing.assert_close(res.key_scores.double(), ref, atol=10 * own + 1e-6, rtol=0)


def test_float64_exact_and_rows_sum_to_query_count():
    q, k, v = _qkv(1, 2, 2, 300, 300, dtype=torch.float64)
    res = attnkit.attention(q, k, v, mask=M.causal(), return_key_scores=True)
    ref = _dense_column_sums(q, k, v, mask=M.causal())
    torch.testing.assert_close(res.key_scores, ref, atol=1e-11, rtol=0)
    # every row's weights sum to 1, so the column sums add up to L
    torch.testing.assert_close(res.key_scores.sum(-1), torch.full((1, 2), 300.0, dtype=torch.float64))


def test_tiled_path_at_2k_with_small_tiles(monkeypatch):
    # force many (query × key) tiles, and the first pass that computes the lse itself
    monkeypatch.setattr(KS, "TILE_ELEMENTS", 1 << 14)
    q, k, v = _qkv(1, 2, 1, 2048, 2048, E=8, dtype=torch.float64)
    call = attnkit.core.call.make_call(q, k, v, mask=M.causal())
    got = KS.key_scores(call, None)
    ref = _dense_column_sums(q, k, v, mask=M.causal())
    torch.testing.assert_close(got, ref, atol=1e-9, rtol=0)


def test_fully_masked_rows_give_nothing():
    q, k, v = _qkv(1, 1, 1, 4, 6, dtype=torch.float64)
    allowed = torch.ones(1, 1, 4, 6, dtype=torch.bool)
    allowed[..., 1, :] = False
    res = attnkit.attention(q, k, v, mask=allowed, return_key_scores=True)
    torch.testing.assert_close(res.key_scores, _dense_column_sums(q, k, v, mask=allowed))
    assert float(res.key_scores.sum()) == pytest.approx(3.0)


def test_bad_flag_names_argument():
    q, k, v = _qkv(1, 1, 1, 4, 4)
    with pytest.raises((TypeError, ValueError), match="return_key_scores"):
        attnkit.attention(q, k, v, return_key_scores="yes")
