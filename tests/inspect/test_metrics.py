"""attnkit.inspect.metrics against independent numpy loops, plus classification on planted heads."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.inspect.metrics import (
    HEAD_LABELS,
    HeadSummary,
    HeadThresholds,
    RowSummaryAccumulator,
    classify_heads,
    max_weight,
    mean_attention_distance,
    next_token_mass,
    normalized_entropy,
    previous_token_mass,
    row_summaries_from_weights,
    self_mass,
    sink_mass,
)

# ----------------------------------------------------------------- helpers


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Softmax with True = allowed; fully masked rows give 0 (not NaN)."""
    s = scores.masked_fill(~mask, -math.inf)
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(s - m)
    z = e.sum(-1, keepdim=True)
    return torch.where(z > 0, e / z.clamp(min=1e-300), torch.zeros_like(e))


def random_case(seed: int, B=2, H=3, L=7, S=9, full_rows=True):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(B, H, L, S, generator=g, dtype=torch.float64) * 3
    mask = torch.rand(B, H, L, S, generator=g) > 0.3
    if full_rows:
        mask[0, 1, 2] = False  # a fully masked row
        mask[1, 0, 0] = False
        mask[1, 2, 5, :] = False
        mask[1, 2, 5, S // 2] = True  # a row with exactly one allowed key
    return scores, mask, masked_softmax(scores, mask)


def np_entropy_normalised(w, allowed):
    B, H, L, S = w.shape
    out = np.zeros((B, H, L))
    for idx in np.ndindex(B, H, L):
        keys = [j for j in range(S) if allowed[idx][j]]
        p = np.array([w[idx][j] for j in keys])
        p = p[p > 0]
        n = len(keys)
        if n >= 2:
            out[idx] = -(p * np.log(p)).sum() / np.log(n)
    return out


# --------------------------------------------------------- per-row metrics


def test_normalized_entropy_matches_numpy_with_and_without_mask():
    _, mask, w = random_case(0)
    got = normalized_entropy(w, key_mask=mask).numpy()
    np.testing.assert_allclose(got, np_entropy_normalised(w.numpy(), mask.numpy()), atol=1e-12)
    got_nomask = normalized_entropy(w).numpy()
    np.testing.assert_allclose(got_nomask, np_entropy_normalised(w.numpy(), np.ones(w.shape, bool)), atol=1e-12)
    assert got[0, 1, 2] == 0.0 and got[1, 2, 5] == 0.0  # fully masked / single-key rows
    assert np.isfinite(got).all()


def test_normalized_entropy_extremes_and_padding_mask():
    B, H, L, S = 2, 1, 3, 5
    pad = torch.tensor([[True] * 5, [True, True, True, False, False]])
    w = torch.zeros(B, H, L, S, dtype=torch.float64)
    w[0] = 1 / 5  # uniform over all keys
    w[1, :, :, :3] = 1 / 3  # uniform over the 3 real keys
    ent = normalized_entropy(w, key_mask=pad)
    torch.testing.assert_close(ent, torch.ones(B, H, L, dtype=torch.float64))
    # Without the padding mask the padded sequence is judged against log 5.
    expected = torch.full((H, L), math.log(3) / math.log(5), dtype=torch.float64)
    torch.testing.assert_close(normalized_entropy(w)[1], expected)
    onehot = torch.zeros(1, 1, 2, 4)
    onehot[..., 2] = 1
    assert normalized_entropy(onehot).abs().max() == 0


def test_causal_mask_as_4d():
    L = 4
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    w = masked_softmax(torch.zeros(1, 2, L, L), causal.expand(1, 2, L, L))  # uniform over the prefix
    got = normalized_entropy(w, key_mask=causal[None, None])
    torch.testing.assert_close(got, torch.tensor([0.0, 1, 1, 1]).expand(1, 2, L))


def test_max_weight_distance_and_positional_masses_match_numpy():
    _, _, w = random_case(1, L=6, S=8)
    wn = w.numpy()
    B, H, L, S = wn.shape
    for offset in (0, 2, -1):
        dist = np.zeros((B, H, L))
        prev, nxt, own = (np.zeros((B, H, L)) for _ in range(3))
        for b, h, i in np.ndindex(B, H, L):
            pos = i + offset
            dist[b, h, i] = sum(wn[b, h, i, j] * abs(pos - j) for j in range(S))
            prev[b, h, i] = wn[b, h, i, pos - 1] if 0 <= pos - 1 < S else 0.0
            nxt[b, h, i] = wn[b, h, i, pos + 1] if 0 <= pos + 1 < S else 0.0
            own[b, h, i] = wn[b, h, i, pos] if 0 <= pos < S else 0.0
        np.testing.assert_allclose(mean_attention_distance(w, offset).numpy(), dist, atol=1e-12)
        np.testing.assert_allclose(previous_token_mass(w, offset).numpy(), prev, atol=0)
        np.testing.assert_allclose(next_token_mass(w, offset).numpy(), nxt, atol=0)
        np.testing.assert_allclose(self_mass(w, offset).numpy(), own, atol=0)
    np.testing.assert_array_equal(max_weight(w).numpy(), wn.max(-1))


def test_sink_mass_positions_forms():
    _, _, w = random_case(2)
    wn = w.numpy()
    np.testing.assert_array_equal(sink_mass(w).numpy(), wn[..., 0])
    np.testing.assert_allclose(sink_mass(w, [0, -1]).numpy(), wn[..., 0] + wn[..., -1], atol=1e-15)
    np.testing.assert_allclose(sink_mass(w, [3, 3]).numpy(), wn[..., 3])  # duplicates count once
    special = torch.zeros(2, 9, dtype=torch.bool)
    special[0, 4] = special[1, 7] = special[1, 8] = True
    got = sink_mass(w, special).numpy()
    np.testing.assert_allclose(got[0], wn[0, ..., 4])
    np.testing.assert_allclose(got[1], wn[1, ..., 7] + wn[1, ..., 8])


@pytest.mark.parametrize(
    "call, exc, words",
    [
        (lambda: normalized_entropy(torch.rand(3, 4, 4)), ValueError, ["weights", "(B, H, L, S)", "weights[None]"]),
        (lambda: max_weight(torch.ones(1, 1, 2, 2, dtype=torch.long)), TypeError, ["weights", "float"]),
        (lambda: normalized_entropy([[0.5]]), TypeError, ["weights", "list"]),
        (
            lambda: normalized_entropy(torch.rand(2, 1, 3, 4), key_mask=torch.ones(2, 4)),
            TypeError,
            ["key_mask", "bool"],
        ),
        (
            lambda: normalized_entropy(torch.rand(2, 1, 3, 4), key_mask=torch.ones(3, 4, dtype=torch.bool)),
            ValueError,
            ["key_mask", "(2, 4)", "[None, None]"],
        ),
        (
            lambda: normalized_entropy(torch.rand(2, 1, 3, 4), key_mask=torch.ones(1, 1, 5, 4, dtype=torch.bool)),
            ValueError,
            ["key_mask", "broadcast"],
        ),
        (lambda: sink_mass(torch.rand(1, 1, 2, 3), 3), ValueError, ["positions", "3"]),
        (lambda: mean_attention_distance(torch.rand(1, 1, 2, 3), 1.5), TypeError, ["offset"]),
    ],
)
def test_bad_inputs_name_the_argument(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    for word in words:
        assert word in str(info.value)


# ---------------------------------------------------------- row summaries


def np_row_summary(w, k, sinks, offset):
    """Independent numpy reference for RowSummary fields."""
    B, H, L, S = w.shape
    ent = np.zeros((B, H, L))
    dist = np.zeros((B, H, L))
    top_w = np.zeros((B, H, L, k))
    top_i = -np.ones((B, H, L, k), dtype=np.int64)
    for idx in np.ndindex(B, H, L):
        p = w[idx]
        nz = p[p > 0]
        ent[idx] = -(nz * np.log(nz)).sum()
        dist[idx] = sum(p[j] * abs(idx[2] + offset - j) for j in range(S))
        order = [j for j in np.argsort(-p, kind="stable") if p[j] > 0][:k]
        top_w[idx][: len(order)] = p[order]
        top_i[idx][: len(order)] = order
    sink = sum((w[..., p] for p in sinks if p < S), np.zeros((B, H, L)))
    return ent, dist, top_w, top_i, sink


@pytest.mark.parametrize("tile", [1, 3, 4, 9, 20])
@pytest.mark.parametrize("use_lse", [True, False])
def test_accumulator_matches_dense_and_numpy(tile, use_lse):
    scores, mask, w = random_case(3 + tile)
    k, sinks, offset = 4, (0, 5), 1
    S = scores.shape[-1]
    s = scores.masked_fill(~mask, -math.inf)
    acc = RowSummaryAccumulator(k, sink_positions=sinks, offset=offset)
    starts = list(range(0, S, tile))
    np.random.default_rng(tile).shuffle(starts)  # tiles may arrive in any order
    for start in starts:
        acc.update(start, s[..., start : start + tile])
    lse = torch.logsumexp(s, -1) if use_lse else None
    tiled = acc.finalize(lse)
    dense = row_summaries_from_weights(w, k, sink_positions=sinks, offset=offset)
    ent, dist, top_w, top_i, sink = np_row_summary(w.numpy(), k, sinks, offset)

    for r in (tiled, dense):
        np.testing.assert_allclose(r.entropy.numpy(), ent, atol=1e-10)
        np.testing.assert_allclose(r.distance.numpy(), dist, atol=1e-10)
        np.testing.assert_allclose(r.topk_weights.numpy(), top_w, atol=1e-12)
        np.testing.assert_array_equal(r.topk_indices.numpy(), top_i)
        np.testing.assert_allclose(r.sink_mass.numpy(), sink, atol=1e-12)
        np.testing.assert_allclose(r.max_weight.numpy(), w.numpy().max(-1), atol=1e-12)
        for field in ("entropy", "distance", "topk_weights", "sink_mass", "max_weight", "mass"):
            assert torch.isfinite(getattr(r, field)).all(), field
    # Fully masked rows: everything 0, no NaN, indices -1.
    for idx in [(0, 1, 2), (1, 0, 0)]:
        assert tiled.entropy[idx] == 0 and tiled.sink_mass[idx] == 0 and tiled.mass[idx] == 0
        assert (tiled.topk_indices[idx] == -1).all()
    np.testing.assert_allclose(tiled.mass.numpy(), w.sum(-1).numpy(), atol=1e-12)


def test_accumulator_is_stable_for_large_scores_and_half_precision():
    scores, mask, _ = random_case(7, full_rows=False)
    s = (scores + 1000.0).masked_fill(~mask, -math.inf)  # exp(1000) would overflow without the running max
    acc = RowSummaryAccumulator(3)
    for start in range(0, 9, 2):
        acc.update(start, s[..., start : start + 2])
    ref = row_summaries_from_weights(torch.softmax(s, -1), 3)
    got = acc.finalize(torch.logsumexp(s, -1))
    torch.testing.assert_close(got.entropy, ref.entropy, atol=1e-9, rtol=0)
    # float16 tiles are accumulated in float32: error is the fp16 rounding of the scores only.
    s16 = scores.masked_fill(~mask, -math.inf).half()
    acc16 = RowSummaryAccumulator(3)
    acc16.update(0, s16[..., :5])
    acc16.update(5, s16[..., 5:])
    got16 = acc16.finalize()
    assert got16.entropy.dtype == torch.float32
    ref16 = row_summaries_from_weights(torch.softmax(s16.double(), -1), 3)
    torch.testing.assert_close(got16.entropy.double(), ref16.entropy, atol=1e-5, rtol=0)
    torch.testing.assert_close(acc16.logsumexp().double(), torch.logsumexp(s16.double(), -1), atol=1e-5, rtol=0)


def test_accumulator_k_larger_than_keys_pads_like_dense():
    scores, mask, w = random_case(8, S=3)
    s = scores.masked_fill(~mask, -math.inf)
    acc = RowSummaryAccumulator(6)
    acc.update(0, s[..., :2])
    acc.update(2, s[..., 2:])
    got, ref = acc.finalize(), row_summaries_from_weights(w, 6)
    assert got.topk_indices.shape == ref.topk_indices.shape == (2, 3, 7, 6)
    torch.testing.assert_close(got.topk_weights, ref.topk_weights)
    torch.testing.assert_close(got.topk_indices, ref.topk_indices)


def test_accumulator_errors():
    acc = RowSummaryAccumulator(2)
    with pytest.raises(ValueError, match="update"):
        acc.finalize()
    acc.update(0, torch.zeros(1, 1, 2, 4))
    with pytest.raises(ValueError, match="overlaps"):
        acc.update(3, torch.zeros(1, 1, 2, 4))
    with pytest.raises(ValueError, match=r"\(B, H, L\)"):
        acc.update(4, torch.zeros(1, 2, 2, 4))
    with pytest.raises(ValueError, match="NaN"):
        acc.update(4, torch.full((1, 1, 2, 1), math.nan))
    with pytest.raises(ValueError, match="lse"):
        acc.finalize(torch.zeros(2, 2))
    with pytest.raises(ValueError, match="k_start"):
        acc.update(-1, torch.zeros(1, 1, 2, 1))
    with pytest.raises(ValueError, match="k"):
        RowSummaryAccumulator(0)
    with pytest.raises(ValueError, match="sink_positions"):
        RowSummaryAccumulator(2, sink_positions=-1)


@settings(max_examples=25, deadline=None)
@given(
    L=st.integers(1, 5),
    S=st.integers(1, 12),
    tile=st.integers(1, 12),
    k=st.integers(1, 6),
    p_mask=st.floats(0.0, 0.9),
    seed=st.integers(0, 2**31 - 1),
)
def test_accumulator_property(L, S, tile, k, p_mask, seed):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(1, 2, L, S, generator=g, dtype=torch.float64) * 4
    mask = torch.rand(1, 2, L, S, generator=g) >= p_mask
    s = scores.masked_fill(~mask, -math.inf)
    acc = RowSummaryAccumulator(k)
    for start in range(0, S, tile):
        acc.update(start, s[..., start : start + tile])
    got, ref = acc.finalize(torch.logsumexp(s, -1)), row_summaries_from_weights(masked_softmax(scores, mask), k)
    for field in ("entropy", "max_weight", "topk_weights", "sink_mass", "distance", "mass"):
        torch.testing.assert_close(getattr(got, field), getattr(ref, field), atol=1e-10, rtol=0, msg=field)
    torch.testing.assert_close(got.topk_indices, ref.topk_indices)


# ----------------------------------------------------------- classification


def planted_layer(B=2, L=8):
    """Six heads, one per label, in HEAD_LABELS order."""
    g = torch.Generator().manual_seed(0)
    w = torch.zeros(B, 6, L, L, dtype=torch.float64)
    w[:, 0, :, 0] = 0.95  # dead: parked on the first token
    w[:, 0, :, 1:] = 0.05 / (L - 1)
    w[:, 1] = 1.0 / L  # uniform
    for i in range(L):
        w[:, 2, i, max(i - 1, 0)] = 1.0  # previous (row 0 has no previous key: itself)
        w[:, 3, i, min(i + 1, L - 1)] = 1.0  # next
        w[:, 4, i, i] = 1.0  # self
    # content: each row peaks on a key that is neither fixed nor positional.
    for b in range(B):
        perm = torch.randperm(L, generator=g)
        for i in range(L):
            j = int(perm[i])
            if abs(j - i) <= 1:
                j = (i + 3) % L
            w[b, 5, i] = 0.1 / (L - 1)
            w[b, 5, i, j] = 0.9
    return w


def test_classify_planted_heads_and_numbers():
    w = planted_layer()
    summary = classify_heads([w, w.flip(1)])
    assert isinstance(summary, HeadSummary) and len(summary) == 12
    assert summary.labels()[0] == list(HEAD_LABELS)
    assert summary.labels()[1] == list(reversed(HEAD_LABELS))
    dead = summary[0, 0]
    assert dead.fixed_position == 0 and dead.fixed_mass == pytest.approx(0.95)
    assert dead.sink_mass == pytest.approx(0.95) and "fixed_mass" in dead.reason
    assert summary[0, 1].entropy == pytest.approx(1.0)
    assert summary[0, 2].previous_mass == pytest.approx(1.0)  # row 0 is not counted: no previous key
    assert summary[0, 3].next_mass == pytest.approx(1.0)
    assert summary[0, 4].self_mass == pytest.approx(1.0)
    # Mean distance of the self head is 0, of the previous head (7 rows at 1, row 0 at 0) is 7/8.
    assert summary[0, 4].distance == pytest.approx(0.0)
    assert summary[0, 2].distance == pytest.approx(7 / 8)
    assert summary.counts() == {label: 2 for label in HEAD_LABELS}


def test_classify_special_keys_padding_and_causal():
    B, L = 2, 6
    w = torch.zeros(B, 1, L, L)
    sep = torch.zeros(B, L, dtype=torch.bool)
    sep[0, 3] = sep[1, 5] = True  # [SEP] at a different position in each sequence
    w[0, 0, :, 3] = 0.9
    w[1, 0, :, 5] = 0.9
    w[..., 0] += 0.1
    # Per sequence one key gets 0.9 of each row, so it is "fixed" either way.
    s = classify_heads([w], special_keys=sep)
    assert s[0, 0].label == "dead" and s[0, 0].special_mass == pytest.approx(0.9)
    # Causal previous-token head: row 0 must sit on key 0.
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    prev = torch.zeros(1, 1, L, L)
    prev[0, 0, 0, 0] = 1
    for i in range(1, L):
        prev[0, 0, i, i - 1] = 1
    s = classify_heads([prev], key_mask=causal[None, None])
    assert s[0, 0].label == "positional-previous"
    # Padded queries (query_mask False) are left out of the means.
    q = torch.ones(1, L, dtype=torch.bool)
    q[0, -2:] = False
    noisy = prev.clone()
    noisy[0, 0, -2:] = 0
    noisy[0, 0, -2:, 0] = 1  # padded rows parked on key 0
    assert classify_heads([noisy], query_mask=q)[0, 0].previous_mass == pytest.approx(1.0)
    assert classify_heads([noisy])[0, 0].previous_mass == pytest.approx(3 / 5)


def test_thresholds_change_labels_and_validate():
    w = planted_layer()
    strict = classify_heads([w], thresholds=HeadThresholds(dead_mass=0.99))
    assert strict[0, 0].label != "dead"
    with pytest.raises(ValueError, match="dead_mass"):
        HeadThresholds(dead_mass=1.5)
    with pytest.raises(TypeError, match="thresholds"):
        classify_heads([w], thresholds={"dead_mass": 0.5})


def test_classify_fully_masked_head_and_bad_inputs():
    w = torch.zeros(1, 2, 3, 3)
    w[:, 1] = 1 / 3
    s = classify_heads([w])
    assert s[0, 0].label == "dead" and math.isnan(s[0, 0].entropy)
    assert s[0, 1].label == "uniform"
    with pytest.raises(ValueError, match=r"\[weights\]"):
        classify_heads(w)
    with pytest.raises(ValueError, match="attentions"):
        classify_heads([])
    with pytest.raises(ValueError, match="share B, L, S"):
        classify_heads([w, torch.zeros(1, 2, 3, 4)])
    with pytest.raises(ValueError, match="query_mask"):
        classify_heads([w], query_mask=torch.ones(1, 4, dtype=torch.bool))


def test_summary_rendering_and_metric_table():
    w = planted_layer(B=1)
    s = classify_heads([w, w[:, :3]])  # layer 1 has only 3 heads
    assert s.num_layers == 2 and s.num_heads == 6 and len(s) == 9
    ent = s.metric("entropy")
    assert ent.shape == (2, 6) and torch.isnan(ent[1, 3:]).all() and ent[0, 1] == pytest.approx(1.0)
    text = s.to_text()
    assert len(text.splitlines()) == 2 + 9 and "positional-next" in text and str(s) == text
    md = s.to_markdown()
    assert md.splitlines()[0].startswith("| layer | head | label |") and len(md.splitlines()) == 11
    html = s.to_html()
    assert html.count("<tr") == 10 and 'class="label-dead"' in html and s._repr_html_() == html
    rows = s.to_rows()
    assert rows[0]["label"] == "dead" and "special_mass" not in rows[0]
    with pytest.raises(ValueError, match="entropy"):
        s.metric("nope")
    with pytest.raises(KeyError):
        s[5, 0]


def test_summary_html_escapes_cells():
    from attnkit.inspect.metrics import HeadStats

    stat = HeadStats(0, 0, "content", *([0.5] * 8), 0, None, "<script>x</script>")
    out = HeadSummary((stat,)).to_html()
    assert "<script>" not in out and "&lt;script&gt;" in out
