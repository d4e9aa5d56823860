"""Cache objects on their own: storage, growth, ring order, GQA memory, reorder (beam search),
cross-attention, and every bad input with a clear error."""

from __future__ import annotations

import pytest
import torch

from attnkit import MultiHeadAttention
from attnkit.cache import CrossAttentionCache, DynamicCache, SlidingWindowCache, StaticCache, make_cache
from attnkit.models.toy_decoder import ToyDecoder


def _kv(B=2, Hkv=2, L=3, E=4):
    return torch.randn(B, Hkv, L, E), torch.randn(B, Hkv, L, E)


def test_dynamic_cache_grows_geometrically_and_keeps_contents():
    c = DynamicCache(initial_capacity=2)
    ks, vs, caps = [], [], []
    for _ in range(9):
        k, v = _kv(L=1)
        view = c.update(k, v)
        ks.append(k), vs.append(v), caps.append(c.capacity)
    assert caps == [2, 2, 4, 4, 8, 8, 8, 8, 16]
    torch.testing.assert_close(view.k, torch.cat(ks, 2), rtol=0, atol=0)
    torch.testing.assert_close(view.v, torch.cat(vs, 2), rtol=0, atol=0)
    assert view.positions[0].tolist() == list(range(9)) and view.valid is None and view.in_order
    assert c.peak_nbytes >= c.nbytes  # the growth copy briefly holds both buffers


def test_padded_tokens_are_compacted_with_per_row_positions():
    c = DynamicCache()
    k, v = _kv(B=2, L=4)
    valid = torch.tensor([[False, False, True, True], [True, True, True, False]])  # left / right padded
    view = c.update(k, v, valid=valid)
    assert c.seq_lengths().tolist() == [2, 3]
    torch.testing.assert_close(view.k[0, :, :2], k[0, :, 2:], rtol=0, atol=0)
    torch.testing.assert_close(view.k[1, :, :3], k[1, :, :3], rtol=0, atol=0)
    assert view.valid.tolist() == [[True, True, False], [True, True, True]]
    view = c.update(*_kv(B=2, L=1))
    assert view.positions[0, :3].tolist() == [0, 1, 2] and view.positions[1].tolist() == [0, 1, 2, 3]


def test_sliding_cache_ring_keeps_last_window_positions_out_of_order():
    c = SlidingWindowCache(window=3)
    ks = []
    for _ in range(5):
        k, v = _kv(B=1, L=1)
        view = c.update(k, v)
        ks.append(k)
    # positions 0..4 → slots p mod 3: slot 0 holds 3, slot 1 holds 4, slot 2 holds 2
    assert view.positions[0].tolist() == [3, 4, 2]
    torch.testing.assert_close(view.k[:, :, 0], ks[3][:, :, 0], rtol=0, atol=0)
    assert c.capacity == 3 and c.seq_lengths().tolist() == [5]


def test_gqa_and_mqa_shrink_the_cache_by_h_over_hkv():
    x = torch.randn(2, 10, 32)
    sizes = {}
    for hkv in (8, 2, 1):
        mha = MultiHeadAttention(32, 8, kv_heads=hkv)
        c = StaticCache(16)
        with torch.no_grad():
            mha(x, cache=c, causal=True)
        sizes[hkv] = c.kv_nbytes
    assert sizes[8] == 2 * (2 * 8 * 16 * 4) * 4  # k and v, each B*Hkv*max_len*E float32
    assert sizes[8] == 4 * sizes[2] == 8 * sizes[1]


def _gen_logits(model, toks, caches):
    with torch.no_grad():
        return model(toks, caches=caches)


@pytest.mark.parametrize("kind", ["dynamic", "static", "sliding"])
def test_reorder_matches_recomputation(kind):
    """Beam search: after reorder(idx) (with repeats, and B changing 3 → 4), continuing from the
    cache equals recomputing the reordered sequences from scratch."""
    torch.manual_seed(3)
    model = ToyDecoder(32, 32, 4, kv_heads=2, num_layers=2, position="alibi", window=4 if kind == "sliding" else None).eval()
    kw = {"static": {"max_len": 12}, "sliding": {"window": 4}, "dynamic": {}}[kind]
    caches = model.make_caches(kind, **kw)
    seq = torch.randint(0, 32, (3, 5))
    _gen_logits(model, seq, caches)
    idx = torch.tensor([2, 0, 0, 1])
    for c in caches:
        c.reorder(idx)
    cont = torch.randint(0, 32, (4, 3))
    got = torch.cat([_gen_logits(model, cont[:, j:j + 1], caches) for j in range(3)], 1)
    full = torch.cat([seq[idx], cont], 1)
    want = _gen_logits(model, full, None)[:, 5:]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_cross_attention_cache_projects_encoder_once():
    torch.manual_seed(4)
    mha = MultiHeadAttention(16, 4, kv_heads=2).eval()
    enc = torch.randn(2, 7, 16)
    enc_valid = torch.tensor([[1] * 7, [1] * 4 + [0] * 3])
    dec = torch.randn(2, 3, 16)
    calls = []
    mha.k_proj.register_forward_hook(lambda *a: calls.append(1))
    cache = CrossAttentionCache()
    with torch.no_grad():
        steps = [mha(dec[:, :1], enc, cache=cache, attention_mask=enc_valid)[0]]
        steps += [mha(dec[:, j:j + 1], cache=cache)[0] for j in (1, 2)]
        want, _ = mha(dec, enc, attention_mask=enc_valid)
    assert len(calls) == 2  # 1 for the cache + 1 for the uncached reference
    torch.testing.assert_close(torch.cat(steps, 1), want, atol=1e-6, rtol=1e-6)
    cache.reorder([1, 1])
    assert cache.batch_size == 2 and cache.valid[0].tolist() == [True] * 4 + [False] * 3
    with pytest.raises(ValueError, match="already holds encoder keys; pass key=None"):
        mha(dec[:, :1], enc, cache=cache)
    cache.reset()
    with pytest.raises(ValueError, match="CrossAttentionCache is empty"):
        mha(dec[:, :1], cache=cache)


def test_nbytes_and_reset():
    c = StaticCache(8)
    assert c.nbytes == 0 and not c.initialized
    c.update(*_kv(B=1, Hkv=1, L=2, E=4))
    assert c.kv_nbytes == 2 * 8 * 4 * 4 and c.nbytes == c.kv_nbytes + 8 * 8
    c.reset()
    assert c.nbytes == 0 and not c.initialized


# bad input ---------------------------------------------------------------------------------------
def test_static_cache_overflow_is_a_clear_error():
    c = StaticCache(4)
    c.update(*_kv(L=3))
    with pytest.raises(ValueError, match=r"StaticCache\(max_len=4\) overflow: a row holds 3 tokens and 2 more.*max_len >= 5"):
        c.update(*_kv(L=2))
    assert c.seq_lengths().tolist() == [3, 3]  # nothing was written
    c.update(*_kv(L=1))  # still usable up to max_len


def test_static_overflow_through_the_model():
    model = ToyDecoder(16, 16, 2, num_layers=1)
    with pytest.raises(ValueError, match="overflow"):
        model.generate(torch.zeros(1, 3, dtype=torch.long), 4, cache="static", max_len=5)


def test_batch_mismatch_between_cache_and_input():
    mha = MultiHeadAttention(16, 2)
    c = DynamicCache()
    with torch.no_grad():
        mha(torch.randn(2, 3, 16), cache=c, causal=True)
        with pytest.raises(ValueError, match=r"holds B=2 sequences but the input has B=3; reset\(\) the cache.*reorder"):
            mha(torch.randn(3, 1, 16), cache=c, causal=True)
    with pytest.raises(ValueError, match="holds B=2 sequences but the input has B=1"):
        c.update(*_kv(B=1))


def test_other_bad_inputs():
    c = DynamicCache()
    with pytest.raises(ValueError, match="before the cache holds anything"):
        c.reorder([0])
    c.update(*_kv(B=2, Hkv=2))
    with pytest.raises(ValueError, match=r"holds \(Hkv, E, Ev\)=\(2, 4, 4\).*one cache per attention layer"):
        c.update(*_kv(B=2, Hkv=1))
    with pytest.raises(TypeError, match="holds torch.float32"):
        c.update(*(t.double() for t in _kv(B=2)))
    with pytest.raises(ValueError, match=r"indices must lie in \[0, B=2\)"):
        c.reorder([0, 2])
    with pytest.raises(ValueError, match="1-D integer tensor"):
        c.reorder(torch.tensor([0.0]))
    with pytest.raises(ValueError, match="kind must be one of"):
        make_cache("paged")
    mha = MultiHeadAttention(16, 2)
    with pytest.raises(ValueError, match=r"attention_mask covers the new tokens only and must be \(B, L\)=\(1, 2\)"):
        mha(torch.randn(1, 2, 16), cache=DynamicCache(), attention_mask=torch.ones(1, 5))
    with pytest.raises(ValueError, match="self-attention cache, so key must be None"):
        mha(torch.randn(1, 2, 16), torch.randn(1, 3, 16), cache=DynamicCache())
    with pytest.raises(TypeError, match="cache must be an attnkit.cache object"):
        mha(torch.randn(1, 2, 16), cache={})
    with pytest.raises(ValueError, match="positional mask"):
        mha(torch.randn(1, 2, 16), cache=DynamicCache(), mask=torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(TypeError, match="dense bias tensor indexes cache slots"):
        mha(torch.randn(1, 2, 16), cache=DynamicCache(), bias=torch.zeros(2, 2))


def test_sequence_first_layout_with_caches():
    mha = MultiHeadAttention(16, 2, batch_first=False).eval()
    x, enc = torch.randn(5, 2, 16), torch.randn(7, 2, 16)  # (L, B, D)
    with torch.no_grad():
        full, _ = mha(x, causal=True)
        c = DynamicCache()
        steps = [mha(x[:3], cache=c, causal=True)[0]] + [mha(x[t:t + 1], cache=c, causal=True)[0] for t in (3, 4)]
        torch.testing.assert_close(torch.cat(steps, 0), full, atol=1e-5, rtol=0)
        cc = CrossAttentionCache()
        cross = [mha(x[:1], enc, cache=cc)[0], mha(x[1:2], cache=cc)[0]]
        torch.testing.assert_close(torch.cat(cross, 0), mha(x[:2], enc)[0], atol=1e-5, rtol=0)
