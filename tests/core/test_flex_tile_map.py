"""Tile maps of custom predicates: evaluated on the grid, equal to brute force and to FlexAttention's
``create_block_mask``, cached per shape, skipped by the backends; and ``Mask.tile_map`` printing.

Shape legend: L queries, S keys; nq, nk tile rows and columns.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnkit
from attnkit import masks as M
from _routes import route_of
from attnkit.backends.blockwise.kernel.tiles import segments_of
from attnkit.core import tile_map as TM
from attnkit.core.call import make_call
from attnkit.core.tiles import EMPTY, FULL, PARTIAL, TileGrid, kept_fraction

flex_mod = pytest.importorskip("torch.nn.attention.flex_attention")


def brute_force(pred, grid: TileGrid, batch=1, heads=1) -> np.ndarray:
    """(nq, nk) codes from the dense mask, in NumPy: any / all over each tile's pairs, rows and heads."""
    L, S = grid.L, grid.S
    b = torch.arange(batch).view(-1, 1, 1, 1)
    h = torch.arange(heads).view(1, -1, 1, 1)
    dense = pred(b, h, torch.arange(L).view(1, 1, -1, 1), torch.arange(S).view(1, 1, 1, -1))
    dense = np.broadcast_to(dense.numpy(), (batch, heads, L, S))
    out = np.empty(grid.shape, dtype=np.int8)
    for i, (q0, q1) in enumerate(zip(grid.q_start.tolist(), grid.q_end.tolist())):
        for j, (k0, k1) in enumerate(zip(grid.k_start.tolist(), grid.k_end.tolist())):
            t = dense[:, :, q0:q1, k0:k1]
            out[i, j] = FULL if t.all() else EMPTY if not t.any() else PARTIAL
    return out


DOCS = torch.tensor([0] * 70 + [1] * 5 + [2] * 100 + [3] * 25)  # (200,)
PREDICATES = {
    "causal": lambda b, h, q, kv: kv <= q,
    "window": lambda b, h, q, kv: (kv <= q) & (q - kv < 37),
    "document": lambda b, h, q, kv: DOCS[q] == DOCS[kv],
    "stripes": lambda b, h, q, kv: (kv // 16) % 3 == 0,  # full and empty key blocks, no diagonal
    "dilated": lambda b, h, q, kv: ((q - kv) % 4 == 0) & (kv <= q),
}


@pytest.fixture(autouse=True)
def _fresh_cache():
    TM.clear_cache()
    yield
    TM.clear_cache()


@pytest.mark.parametrize("name", sorted(PREDICATES))
@pytest.mark.parametrize("L, S, bq, bk", [(200, 200, 32, 32), (200, 200, 64, 16), (150, 200, 32, 48), (7, 200, 4, 64),
                                         (200, 200, 64, 64), (200, 190, 128, 192), (150, 200, 256, 64)])  # last three: from the 64 x 64 map
def test_predicate_tile_states_equal_brute_force(name, L, S, bq, bk):
    pred = PREDICATES[name]
    if name == "document" and L != S:
        pred = lambda b, h, q, kv: DOCS[q] == DOCS[kv]  # noqa: E731  (ids cover 200 positions)
    grid = TileGrid.uniform(L, S, bq, bk)
    got = TM.predicate_tile_states(pred, grid).numpy()
    np.testing.assert_array_equal(got, brute_force(pred, grid))


def test_small_chunks_and_uneven_tiles(monkeypatch):
    """Chunks that cut through tiles, and a non-uniform grid (ring attention's layouts) give the same codes."""
    monkeypatch.setattr(TM, "CHUNK_ELEMENTS", 3 * 200)  # three query rows per chunk
    pred = PREDICATES["window"]
    q_cuts, k_cuts = [0, 5, 40, 41, 130, 200], [0, 64, 70, 199, 200]
    t = lambda xs: torch.tensor(xs, dtype=torch.int64)  # noqa: E731
    grid = TileGrid(200, 200, t(q_cuts[:-1]), t(q_cuts[1:]), t(k_cuts[:-1]), t(k_cuts[1:]))
    np.testing.assert_array_equal(TM.predicate_tile_states(pred, grid).numpy(), brute_force(pred, grid))


def test_a_predicate_reading_h_over_all_heads():
    pred = lambda b, h, q, kv: (kv <= q) & (q - kv <= 8 * h)  # noqa: E731
    grid = TileGrid.uniform(64, 64, 8, 8)
    got = TM.predicate_tile_states(pred, grid, heads=3).numpy()
    np.testing.assert_array_equal(got, brute_force(pred, grid, heads=3))
    assert not np.array_equal(got, TM.predicate_tile_states(pred, grid, heads=1).numpy())


@pytest.mark.parametrize("name", ["causal", "window", "document", "stripes"])
def test_tile_states_equal_flex_create_block_mask(name):
    """FlexAttention's BlockMask on the same function: the same partial and full blocks per row (n a
    multiple of the block: FlexAttention counts a ragged last block's padding as masked, so partial)."""
    pred, n, blk = PREDICATES[name], 192, 32
    bm = flex_mod.create_block_mask(pred, None, None, n, n, device="cpu", BLOCK_SIZE=blk)
    codes = M.custom(pred).tile_states(TileGrid.uniform(n, n, blk, blk))
    computed, full = bm.to_dense()[0, 0].bool(), torch.zeros_like(codes, dtype=torch.bool)  # to_dense: every computed block
    for row in range(full.shape[0]):
        cols = bm.full_kv_indices[0, 0, row, : bm.full_kv_num_blocks[0, 0, row]]
        full[row, cols.long()] = True
    partial = computed & ~full
    np.testing.assert_array_equal((codes == FULL).numpy(), full.numpy())
    np.testing.assert_array_equal((codes == PARTIAL).numpy(), partial.numpy())


def test_built_in_proofs_agree_with_the_evaluated_map():
    """Where causal / window prove a tile empty or full analytically, the evaluated map says the same."""
    grid = TileGrid.uniform(300, 300, 32, 32)
    for builtin in (M.causal(), M.sliding_window(left=40, right=3)):
        analytic = builtin.tile_states(grid)
        evaluated = TM.predicate_tile_states(builtin.predicate(300, 300), grid)
        proved = analytic != PARTIAL
        assert torch.equal(analytic[proved], evaluated[proved])


# the cache --------------------------------------------------------------------------------------
def test_computed_once_per_shape_and_reused(monkeypatch):
    # counted outside the predicate: a predicate appending to a captured list reads changing state,
    # which the cache's snapshot sees (and so rightly misses)
    rows = []
    real = TM._call
    monkeypatch.setattr(TM, "_call", lambda fn, qr, kr, *a: rows.append(qr[1] - qr[0]) or real(fn, qr, kr, *a))

    def window(b, h, q, kv):
        return (kv <= q) & (q - kv < 64)

    mask = M.custom(window, depends_on=())
    q = torch.randn(1, 2, 512, 16)
    for _ in range(3):  # three "layers"
        attnkit.attention(q, q, q, mask=mask)
    # reused from the tile-map cache, or one level up from the fused route's cache of its segments
    from attnkit.backends.blockwise.kernel import segments_cache as route_cache

    assert TM.cache_info()["hits"] + route_cache.cache_info()["hits"] >= 2
    full_grid_calls = sum(1 for n in rows if n == 512)  # the tile map evaluates all 512 rows in one chunk
    assert full_grid_calls == 1  # one evaluation serves every tile size the call asks for, and every later call


def test_an_in_place_change_of_a_captured_tensor_is_a_new_map():
    docs = torch.zeros(64, dtype=torch.long)
    pred = lambda b, h, q, kv: docs[q] == docs[kv]  # noqa: E731
    grid = TileGrid.uniform(64, 64, 16, 16)
    assert (TM.predicate_tile_states(pred, grid) == FULL).all()
    docs[32:] = 1  # now two documents
    np.testing.assert_array_equal(TM.predicate_tile_states(pred, grid).numpy(), brute_force(pred, grid))


def test_the_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(TM, "CACHE_SIZE", 3)
    pred = PREDICATES["causal"]
    for n in range(10, 20):
        TM.predicate_tile_states(pred, TileGrid.uniform(n, n, 4, 4))
    assert TM.cache_info()["size"] == 3


def test_a_dead_predicate_is_not_served_from_the_cache():
    grid = TileGrid.uniform(32, 32, 8, 8)
    a = lambda b, h, q, kv: kv <= q  # noqa: E731
    TM.predicate_tile_states(a, grid)
    del a
    b = lambda b, h, q, kv: kv > q  # noqa: E731  (may reuse a's address)
    np.testing.assert_array_equal(TM.predicate_tile_states(b, grid).numpy(), brute_force(b, grid))


# the backends skip what the map proves ----------------------------------------------------------
def test_a_custom_window_runs_only_the_non_empty_tiles():
    n, w = 2048, 256
    custom = lambda b, h, q, kv: (kv <= q) & (q - kv < w)  # noqa: E731
    q = torch.randn(1, 2, n, 16)
    call = make_call(q, q, q, mask=custom)
    route = route_of(call)
    assert route is not None and route.kind == "tiles"
    segs = segments_of(call.mask, n, n)
    block = segs.blocks[0][1] - segs.blocks[0][0]
    assert block == 128  # the finer grid: 3 tiles of 128 per 128 queries, not 2 of 256 per 256
    builtin_kept, _ = kept_fraction(M.sliding_window(left=w - 1), n, n, block, block)
    assert segs.pairs == pytest.approx(builtin_kept * n * n)
    assert segs.pairs < 0.2 * n * n  # 46 of 256 tiles of 128 x 128
    out = attnkit.attention(q, q, q, mask=custom).out
    ref = attnkit.attention(q, q, q, mask=M.sliding_window(left=w - 1), backend="reference").out
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-5)


def test_the_tile_loop_never_evaluates_an_empty_tile():
    seen = []

    def window(b, h, q, kv):
        seen.append((int(q.min()), int(q.max()), int(kv.min()), int(kv.max())))
        return (kv <= q) & (q - kv < 8)

    q = torch.randn(1, 1, 64, 8)
    attnkit.blockwise_attention(make_call(q, q, q, mask=window), block_q=8, block_kv=8)
    tiles = [s for s in seen if s[1] - s[0] == 7 and s[3] - s[2] == 7]  # per-tile evaluations
    assert tiles and all(k0 <= q1 and q0 - k1 < 8 for q0, q1, k0, k1 in tiles)


# printing ---------------------------------------------------------------------------------------
def test_tile_map_prints_the_grid():
    tm = M.causal().tile_map(64, 64, 16, 16)
    assert tm.to_string() == "░░\n██░░\n████░░\n██████░░"
    assert "4x4 tiles: 6 full, 4 partial, 6 empty" in repr(tm) and "computed 62.50%" in repr(tm)
    custom = M.custom(lambda b, h, q, kv: kv <= q).tile_map(64, 64, 16, 16)
    assert custom.to_string() == tm.to_string()


def test_tile_map_matches_block_mask_rendering():
    """FlexAttention's printout marks computed blocks; ours marks the same ones (full or partial)."""
    pred, n = PREDICATES["window"], 256
    bm = flex_mod.create_block_mask(pred, None, None, n, n, device="cpu", BLOCK_SIZE=32)
    ours = M.custom(pred).tile_map(n, n, 32, 32).to_string().replace("░░", "██")
    theirs = bm.to_string().strip().split("\n", 1)[1]  # after the "(0, 0)" header
    assert [r.rstrip() for r in ours.split("\n")] == [r.rstrip() for r in theirs.split("\n")]


def test_large_grids_are_summarised():
    text = M.sliding_window(left=63).tile_map(8192, 8192, 64, 64).to_string()
    rows = text.split("\n")
    assert len(rows) <= 20 and max(len(r) for r in rows) <= 40
    assert len(M.causal().tile_map(256, 256, 16, 16).to_string(grid_size=-1).split("\n")) == 16


@pytest.mark.parametrize("arg, value", [("L", 0), ("block_q", -1), ("block_kv", 1.5)])
def test_tile_map_rejects_bad_sizes(arg, value):
    kw = dict(L=8, S=8, block_q=4, block_kv=4)
    kw[arg] = value
    with pytest.raises((ValueError, TypeError)) as err:
        M.causal().tile_map(**kw)
    assert arg in str(err.value)
