"""The chunked mask (Llama 4's local attention), added as one file: it must work everywhere at once.

Parity with a dense reference written here (NumPy, float64) on every exact backend; tile
skipping in blockwise (the skipped tiles are exactly the tiles the dense mask empties, and keys
behind a skipped tile are never read); decoding under KV caches equals full attention; ring
attention on 2 gloo ranks equals the dense reference (contiguous and zigzag layouts, uneven length).
"""

from __future__ import annotations

import math
import os
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnkit
from attnkit.backends import tiling
from attnkit.core import registry
from attnkit.core.call import make_call
from attnkit.core.mask_chunked import ChunkedMask, chunked
from attnkit.core.tiles import EMPTY, FULL, TileGrid
from attnkit.modules.cache import DynamicCache
from attnkit.modules.multihead import MultiHeadAttention


def dense_chunked(L: int, S: int, C: int, align: str = "bottom_right") -> np.ndarray:
    """(L, S) bool written from the definition: k <= p and k // C == p // C, p = i + offset."""
    off = S - L if align == "bottom_right" else 0
    out = np.zeros((L, S), dtype=bool)
    for i in range(L):
        p = i + off
        for j in range(S):
            out[i, j] = j <= p and math.floor(j / C) == math.floor(p / C)
    return out


def numpy_attention(q, k, v, allowed: np.ndarray) -> np.ndarray:
    """float64 softmax attention with GQA by repeating heads; fully masked rows give 0."""
    q, k, v = (t.double().numpy() for t in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    s = np.where(allowed, s, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    den = p.sum(-1, keepdims=True)
    return (p / np.where(den == 0, 1.0, den)) @ v


def _qkv(B, H, Hkv, L, S, E, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, L, E, generator=g), torch.randn(B, Hkv, S, E, generator=g), torch.randn(B, Hkv, S, E, generator=g))


# the mask itself ---------------------------------------------------------------------------------
@pytest.mark.parametrize("L,S,C,align", [(7, 7, 3, "bottom_right"), (4, 9, 4, "bottom_right"), (9, 5, 2, "top_left"), (6, 6, 1, "top_left")])
def test_materialized_mask_matches_the_definition(L, S, C, align):
    got = chunked(C, align).materialize(L, S)[0, 0].numpy()
    np.testing.assert_array_equal(got, dense_chunked(L, S, C, align))


@settings(max_examples=60, deadline=None)
@given(L=st.integers(1, 40), S=st.integers(1, 40), C=st.integers(1, 12), bq=st.integers(1, 9), bk=st.integers(1, 9),
       align=st.sampled_from(["bottom_right", "top_left"]))
def test_tile_states_are_proved_and_as_tight_as_the_dense_mask(L, S, C, align, bq, bk):
    """EMPTY / FULL only where the dense mask is; and with no tile left PARTIAL that is really empty."""
    dense = dense_chunked(L, S, C, align)
    codes = chunked(C, align).tile_states(TileGrid.uniform(L, S, bq, bk))
    for i in range(codes.shape[0]):
        for j in range(codes.shape[1]):
            tile = dense[i * bq:(i + 1) * bq, j * bk:(j + 1) * bk]
            if codes[i, j] == EMPTY:
                assert not tile.any()
            elif codes[i, j] == FULL:
                assert tile.all()
            else:
                assert tile.any(), f"tile ({i}, {j}) is empty but not skipped"


def test_bad_chunk_size_names_the_argument():
    with pytest.raises(ValueError, match="chunk_size must be a positive int"):
        chunked(0)


# every backend -------------------------------------------------------------------------------------
BACKENDS = [b.name for b in attnkit.available_backends() if b.exact]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("L,S,C", [(12, 12, 4), (5, 11, 3), (16, 16, 5)])
def test_every_backend_matches_the_dense_reference(backend, L, S, C):
    q, k, v = _qkv(2, 4, 2, L, S, 8)
    why = registry.get(backend).supports(make_call(q, k, v, mask=chunked(C)))
    if why:
        pytest.skip(f"{backend} declines: {why}")
    want = numpy_attention(q, k, v, dense_chunked(L, S, C))
    got = attnkit.attention(q, k, v, mask=chunked(C), backend=backend).out
    # float32 against float64: the float32 error of plain attention at this size is ~1e-6
    np.testing.assert_allclose(got.double().numpy(), want, atol=2e-5, rtol=0)


# tile skipping in blockwise ------------------------------------------------------------------------
class _Counting(ChunkedMask):
    """The chunked mask, counting how many tiles the backend evaluates it on."""

    evaluated = 0

    def predicate(self, L, S):
        inner = super().predicate(L, S)

        def fn(b, h, q, kv):
            type(self).evaluated += 1
            return inner(b, h, q, kv)

        return fn


def test_blockwise_skips_exactly_the_empty_tiles_and_never_reads_them(monkeypatch):
    # NaN values are the read detector here, so the tile loop itself runs: the NaN guard in front of
    # it (attnkit.backends.nonfinite) would hand NaN inputs to the reference, which spreads them as 0 · NaN
    monkeypatch.setattr("attnkit.backends.blockwise.needs_exact", lambda call: False)
    L = S = 32
    C = block = 8
    codes = tiling.tile_map(chunked(C), L, S, block, block)
    # chunks aligned with tiles: only the diagonal tiles hold pairs; 16 - 4 tiles skipped
    assert int((codes == EMPTY).sum()) == 16 - 4
    dense = dense_chunked(L, S, C)
    really_empty = sum(not dense[i:i + block, j:j + block].any() for i in range(0, L, block) for j in range(0, S, block))
    assert int((codes == EMPTY).sum()) == really_empty
    # keys 0..7 hold NaN values: any tile (i > 0, 0) that was computed would spread NaN into rows >= 8
    q, k, v = _qkv(1, 2, 2, L, S, 4)
    v[:, :, :C] = float("nan")
    _Counting.evaluated = 0
    tiling.set_tile_sizes(block, block)
    try:
        out = attnkit.attention(q, k, v, mask=_Counting(C), backend="blockwise").out
    finally:
        tiling.set_tile_sizes()
    assert torch.isnan(out[:, :, :C]).all()
    assert torch.isfinite(out[:, :, C:]).all()
    assert 1 <= _Counting.evaluated <= 4  # only the 4 partial (diagonal) tiles evaluate the mask


def test_chunked_mask_takes_narrow_tiles_and_cached_costs():
    assert chunked(64).band_width == 64
    assert tiling.default_tiles(chunked(64), 4096, 4096, torch.float32, torch.device("cpu")) == (128, 128)
    kept, evaluated = tiling.kept_fraction(chunked(128), 1024, 1024, 128, 128)
    assert kept == pytest.approx(8 / 64) and evaluated == pytest.approx(8 / 64)


# KV caches -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("steps", [[1] * 11, [3, 1, 4, 2, 1]])
def test_decoding_under_a_cache_equals_full_attention(steps):
    """Mask evaluated at absolute positions: token by token or in uneven chunks, as one full pass."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, kv_heads=2, dtype=torch.float64).eval()
    x = torch.randn(2, sum(steps), 16, dtype=torch.float64)
    with torch.no_grad():
        full, _ = mha(x, mask=chunked(4))
        cache, outs, t = DynamicCache(), [], 0
        for n in steps:
            outs.append(mha(x[:, t:t + n], cache=cache, mask=chunked(4))[0])
            t += n
    torch.testing.assert_close(torch.cat(outs, 1), full, atol=1e-12, rtol=1e-12)


def test_chunked_mask_is_positional():
    assert chunked(4).positional and (chunked(4) & attnkit.masks.causal()).positional


# ring attention ------------------------------------------------------------------------------------
def _ring_modules():
    here = os.path.join(os.path.dirname(__file__), "..", "distributed")
    if here not in sys.path:
        sys.path.insert(0, os.path.abspath(here))
    import _ring_harness
    import _ring_mask_cases

    return _ring_mask_cases, _ring_harness


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
def test_ring_attention_on_two_ranks_matches_the_dense_definition(layout):
    """Uneven length (padded tail), GQA; forward and gradients in float64; chunk pairs the mask
    empties are skipped (checked through the same codes the ring plans with)."""
    from attnkit.distributed.ring_masks import SKIP_PAIR, chunk_codes

    cases, harness = _ring_modules()
    L, C = 22, 5
    dense = torch.from_numpy(dense_chunked(L, L, C))
    case = dict(name=layout, B=2, H=4, Hkv=2, E=8, layout=layout, L=L, mask=chunked(C), dense=dense, seed=1)
    per_rank = harness.run_ranks(cases.mask_parity_worker, 2, [case], timeout=240)
    for rank, rows in per_rank.items():
        for quantity, err in rows[layout].items():
            assert err <= 1e-10, f"rank {rank} {quantity}: {err:.3g}"
    codes = chunk_codes(chunked(C), layout, 2, 6 if layout == "contiguous" else 3, L)
    assert sum(row.count(SKIP_PAIR) for row in codes) > 0
