"""Incremental decoding equals full causal attention over the whole sequence.

The reference runs each sequence *alone and unpadded* through the same model without a cache
(positions 0..n-1, index-based causal / sliding-window masks, index-based biases). The decoding
path runs the batch together: a prompt padded on the left or right to the longest one, then one
token at a time through a cache (compaction, per-row positions, position masks and biases). Both
must give the same logits at every real position (fp32 ≤ 1e-5; float64 ≤ 1e-10).
"""

from __future__ import annotations

import itertools

import pytest
import torch

from attnkit.cache import DynamicCache, StaticCache
from attnkit.models.toy_decoder import ToyDecoder

HEADS = {"mha": 4, "gqa": 2, "mqa": 1}
PROMPTS = [5, 2, 7]  # mixed prompt lengths
NEW = 6  # tokens decoded one at a time


def _model(position: str, heads: str, window=None, dtype=torch.float32, layers=2):
    torch.manual_seed(1)
    m = ToyDecoder(32, 32, 4, kv_heads=HEADS[heads], num_layers=layers, position=position, window=window, max_positions=64, dtype=dtype)
    if m.pos_bias is not None and hasattr(m.pos_bias, "table"):
        with torch.no_grad():
            m.pos_bias.table.normal_(std=1.0)  # large enough that a wrong bucket shows
    return m.eval()


def _sequences(dtype_seed=0):
    g = torch.Generator().manual_seed(2)
    return [torch.randint(0, 32, (p + NEW,), generator=g) for p in PROMPTS]


def _reference(model, seqs):
    with torch.no_grad():
        return [model(s[None])[0] for s in seqs]  # each (n_b, V)


def _padded_prompt(seqs, side):
    P = max(PROMPTS)
    toks = torch.zeros(len(seqs), P, dtype=torch.long)
    am = torch.zeros(len(seqs), P, dtype=torch.long)
    for b, (s, p) in enumerate(zip(seqs, PROMPTS)):
        sl = slice(P - p, P) if side == "left" else slice(0, p)
        toks[b, sl], am[b, sl] = s[:p], 1
    return toks, am


def _decode(model, seqs, caches, side, chunk=None):
    """Logits per row at its real positions: prompt (padded, optionally in chunks) then one token at a time."""
    toks, am = _padded_prompt(seqs, side)
    P = toks.shape[1]
    outs = [[] for _ in seqs]
    with torch.no_grad():
        step = chunk or P
        for c0 in range(0, P, step):
            lg = model(toks[:, c0:c0 + step], caches=caches, attention_mask=am[:, c0:c0 + step])
            for b in range(len(seqs)):
                outs[b].append(lg[b][am[b, c0:c0 + step].bool()])
        for j in range(NEW - 1):  # the last token's logits would predict beyond the sequence: still check it
            nxt = torch.stack([s[p + j] for s, p in zip(seqs, PROMPTS)])[:, None]
            lg = model(nxt, caches=caches)
            assert torch.isfinite(lg).all()
            for b in range(len(seqs)):
                outs[b].append(lg[b])
        nxt = torch.stack([s[p + NEW - 1] for s, p in zip(seqs, PROMPTS)])[:, None]
        lg = model(nxt, caches=caches)
        for b in range(len(seqs)):
            outs[b].append(lg[b])
    return [torch.cat(o, 0) for o in outs]


def _caches(model, kind, window):
    if kind == "dynamic":
        return model.make_caches("dynamic", initial_capacity=4)  # small: forces growth mid-decode
    if kind == "static":
        return model.make_caches("static", max_len=max(PROMPTS) + NEW)
    return model.make_caches("sliding", window=window)


CASES = list(itertools.product(["dynamic", "static", "sliding"], ["mha", "gqa", "mqa"], ["rope", "alibi", "t5", "shaw"]))


@pytest.mark.parametrize("kind,heads,position", CASES)
@pytest.mark.parametrize("side", ["left", "right"])
def test_decode_equals_full_attention(kind, heads, position, side):
    window = 4 if kind == "sliding" else None  # sliding cache vs the sliding-window mask
    model = _model(position, heads, window)
    seqs = _sequences()
    ref = _reference(model, seqs)
    got = _decode(model, seqs, _caches(model, kind, window), side)
    for b in range(len(seqs)):
        assert got[b].shape == ref[b].shape
        torch.testing.assert_close(got[b], ref[b], atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", ["dynamic", "sliding"])
def test_chunked_prompt_float64_exact(kind):
    """Prompt in chunks of 3 (L > 1 against a non-empty cache; for the ring, chunks that evict
    keys their own early queries still need) — in float64 the paths agree to rounding."""
    window = 3 if kind == "sliding" else None
    model = _model("alibi", "gqa", window, dtype=torch.float64)
    seqs = _sequences()
    ref = _reference(model, seqs)
    got = _decode(model, seqs, _caches(model, kind, window), "left", chunk=3)
    for b in range(len(seqs)):
        torch.testing.assert_close(got[b], ref[b], atol=1e-10, rtol=1e-10)


def test_sliding_cache_equals_dynamic_cache_with_window_mask():
    """The ring buffer (out-of-order slots, masked by stored positions) and a dynamic cache holding
    everything under the same sliding-window mask attend the same keys."""
    model = _model("rope", "mha", window=3)
    seqs = _sequences()
    a = _decode(model, seqs, model.make_caches("sliding", window=3), "right")
    b = _decode(model, seqs, model.make_caches("dynamic"), "right")
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=0)


def test_sliding_cache_memory_is_bounded():
    model = _model("rope", "mha", window=3)
    caches = model.make_caches("sliding", window=3)
    _decode(model, _sequences(), caches, "left")
    assert all(c.capacity == 3 for c in caches)
    assert caches[0].seq_lengths().tolist() == [p + NEW for p in PROMPTS]


def test_greedy_generation_matches_recompute():
    model = _model("rope", "gqa", layers=1)
    prompt = torch.randint(0, 32, (1, 4))
    with torch.no_grad():
        slow = model.generate(prompt, 12, cache=None)
        for kind, kw in (("dynamic", {}), ("static", {"max_len": 16})):
            torch.testing.assert_close(model.generate(prompt, 12, cache=kind, **kw), slow)


def test_padded_batch_generation_matches_each_sequence_alone():
    model = _model("t5", "mqa")
    seqs = [torch.randint(0, 32, (p,)) for p in PROMPTS]
    with torch.no_grad():
        alone = torch.cat([model.generate(s[None], 5) for s in seqs])
        for side in ("left", "right"):
            P = max(PROMPTS)
            toks, am = torch.zeros(3, P, dtype=torch.long), torch.zeros(3, P, dtype=torch.long)
            for b, s in enumerate(seqs):
                sl = slice(P - len(s), P) if side == "left" else slice(0, len(s))
                toks[b, sl], am[b, sl] = s, 1
            torch.testing.assert_close(model.generate(toks, 5, attention_mask=am), alone)


def test_padding_queries_give_zeros_not_nan():
    """A left-padding query has no key to attend (padding is not cached): zeros, finite grads."""
    from attnkit import MultiHeadAttention

    mha = MultiHeadAttention(16, 2)
    x = torch.randn(2, 4, 16, requires_grad=True)
    am = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    out, res = mha.attend(x, cache=DynamicCache(), causal=True, attention_mask=am)
    assert torch.isfinite(out).all()
    assert res.out[0, :, :2].abs().max() == 0  # per-head attention output of the pad queries
    out.sum().backward()
    assert torch.isfinite(x.grad).all()


def test_one_query_sees_every_cached_key():
    """The SDPA pitfall: top-left is_causal lets 1 query against 5 keys see only key 0. Here one
    new query attends all cached keys — equal to unmasked attention over them."""
    from attnkit import MultiHeadAttention, attention

    mha = MultiHeadAttention(16, 2).eval()
    x = torch.randn(1, 6, 16)
    cache = StaticCache(8)
    with torch.no_grad():
        mha(x[:, :5], cache=cache, causal=True)
        out, res = mha.attend(x[:, 5:], cache=cache, causal=True)
        q, k, v = mha.project(x[:, 5:], x, x)
        want = attention(q, k, v, backend="reference").out
    assert not res.report.materialized  # no mask or bias was built for the one query
    torch.testing.assert_close(res.out, want, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("chunk", [None, 2])
def test_sliding_cache_alone_applies_the_window(chunk):
    """A model with no window mask of its own, decoding through SlidingWindowCache(3), computes
    sliding-window attention: the cache masks by stored positions, also inside a prompt chunk."""
    windowed = _model("rope", "gqa", window=3)
    seqs = _sequences()
    ref = _reference(windowed, seqs)
    windowed.window = None  # same weights, no mask from the model: only the cache limits the keys
    got = _decode(windowed, seqs, windowed.make_caches("sliding", window=3), "left", chunk=chunk)
    for b in range(len(seqs)):
        torch.testing.assert_close(got[b], ref[b], atol=1e-5, rtol=0)


@pytest.mark.parametrize("position", ["rope", "alibi"])
def test_explicit_shifted_positions_change_nothing_for_relative_encodings(position):
    """RoPE and ALiBi depend only on pos_q - pos_k: decoding with explicit positions shifted by 9
    (through the general position-mask path) equals decoding with the default positions."""
    from attnkit import MultiHeadAttention
    from attnkit.core.biases import ALiBi
    from attnkit.modules.rotary import RotaryEmbedding

    rot = RotaryEmbedding(8, max_positions=32) if position == "rope" else None
    bias = ALiBi(2) if position == "alibi" else None
    mha = MultiHeadAttention(16, 2, rotary=rot).eval()
    x = torch.randn(2, 6, 16)
    outs = []
    for shift in (None, 9):
        cache = DynamicCache()
        with torch.no_grad():
            pos = None if shift is None else torch.arange(4) + shift
            steps = [mha(x[:, :4], cache=cache, causal=True, bias=bias, positions=pos)[0]]
            for t in (4, 5):
                pos = None if shift is None else torch.tensor([t + shift])
                steps.append(mha(x[:, t:t + 1], cache=cache, causal=True, bias=bias, positions=pos)[0])
        outs.append(torch.cat(steps, 1))
    torch.testing.assert_close(outs[0], outs[1], atol=1e-5, rtol=0)
    full, _ = mha(x, causal=True, bias=bias)
    torch.testing.assert_close(outs[0], full, atol=1e-5, rtol=0)


def test_random_batches_chunks_and_caches():
    """Property: any prompt lengths, padding side, prefill chunk size, cache kind and window give
    the same logits as each sequence alone without a cache."""
    hyp = pytest.importorskip("hypothesis")
    st = pytest.importorskip("hypothesis.strategies")

    @hyp.settings(max_examples=25, deadline=None)
    @hyp.given(
        lengths=st.lists(st.integers(1, 6), min_size=1, max_size=3),
        new=st.integers(1, 4),
        side=st.sampled_from(["left", "right"]),
        chunk=st.integers(1, 6),
        kind=st.sampled_from(["dynamic", "static", "sliding"]),
        window=st.integers(1, 5),
        position=st.sampled_from(["rope", "alibi", "t5", "shaw"]),
    )
    def check(lengths, new, side, chunk, kind, window, position):
        torch.manual_seed(5)
        model = ToyDecoder(16, 16, 2, kv_heads=1, num_layers=1, position=position,
                           window=window if kind == "sliding" else None, max_positions=32).eval()
        seqs = [torch.randint(0, 16, (n + new,)) for n in lengths]
        P = max(lengths)
        toks, am = torch.zeros(len(seqs), P, dtype=torch.long), torch.zeros(len(seqs), P, dtype=torch.long)
        for b, (s, n) in enumerate(zip(seqs, lengths)):
            sl = slice(P - n, P) if side == "left" else slice(0, n)
            toks[b, sl], am[b, sl] = s[:n], 1
        kw = {"dynamic": {"initial_capacity": 1}, "static": {"max_len": P + new}, "sliding": {"window": window}}[kind]
        caches = model.make_caches(kind, **kw)
        with torch.no_grad():
            ref = [model(s[None])[0] for s in seqs]
            got = [[] for _ in seqs]
            for c0 in range(0, P, chunk):
                lg = model(toks[:, c0:c0 + chunk], caches=caches, attention_mask=am[:, c0:c0 + chunk])
                for b in range(len(seqs)):
                    got[b].append(lg[b][am[b, c0:c0 + chunk].bool()])
            for j in range(new):
                lg = model(torch.stack([s[n + j] for s, n in zip(seqs, lengths)])[:, None], caches=caches)
                for b in range(len(seqs)):
                    got[b].append(lg[b])
        for b in range(len(seqs)):
            torch.testing.assert_close(torch.cat(got[b]), ref[b], atol=1e-5, rtol=0)

    check()
