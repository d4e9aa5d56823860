"""SinkCache, H2OCache, SnapKVCache, QuantizedCache: each against a float64 reference of its own rule.

The references recompute every step from scratch with plain tensor ops: which tokens the rule keeps
(by original index), at which positions, and the attention of the new query over them. A single
attention layer makes keys and values functions of their own token only, so "a fresh forward over
the kept tokens" is exactly that.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from attnkit import MultiHeadAttention
from attnkit.cache import DynamicCache, H2OCache, QuantizedCache, SinkCache, SnapKVCache, make_cache
from attnkit.modules.rotary import RotaryEmbedding

D, H = 16, 4


def _layer(seed=0, kv_heads=None):
    torch.manual_seed(seed)
    return MultiHeadAttention(D, H, kv_heads=kv_heads, rotary=RotaryEmbedding(D // H, max_positions=4096)).double().eval()


def _proj(mha, x, pos):
    """q, k, v (H, n, E) of tokens x (n, D) rotated at ``pos`` (n,)."""
    q = mha.project_q(x[None])
    k, v = mha.project_kv(x[None], x[None])
    return mha.rotary(q, pos)[0], mha.rotary(k, pos)[0], v[0]


def _attend(mha, x_kept, q_pos, k_pos, x_new):
    """Output (D,) of the new token's query over the kept tokens, float64, explicit softmax."""
    q, _, _ = _proj(mha, x_new[None], torch.tensor([q_pos]))
    _, k, v = _proj(mha, x_kept, k_pos)
    w = torch.softmax(q @ k.transpose(-1, -2) / (D // H) ** 0.5, -1)  # (H, 1, n)
    return mha.merge((w @ v)[None])[0, 0], w[:, 0]


def _step(mha, cache, x, t, ok=None):
    am = None if ok is None else ok[:, None].long()
    out, _ = mha(x[:, t:t + 1], cache=cache, causal=True, attention_mask=am)
    return out[:, 0]


def test_sink_cache_equals_fresh_forward_on_kept_tokens_mixed_lengths():
    mha, sinks, window, T = _layer(), 2, 5, 40
    x = torch.randn(2, T, D, dtype=torch.float64)
    ok = torch.ones(2, T, dtype=torch.bool)
    ok[1, 3::4] = False  # row 1 has padding at every 4th step: its stream is shorter
    cache = SinkCache(sinks, window)
    seen = [[], []]
    with torch.no_grad():
        for t in range(T):
            out = _step(mha, cache, x, t, ok[:, t])
            for b in range(2):
                if not ok[b, t]:
                    continue
                seen[b].append(t)
                kept = seen[b][:sinks] + seen[b][sinks:][-(window):] if len(seen[b]) > sinks + window else list(seen[b])
                n = len(kept)
                ref, _ = _attend(mha, x[b, kept], n - 1, torch.arange(n), x[b, t])
                torch.testing.assert_close(out[b], ref, atol=1e-10, rtol=0)
                assert cache.kept_positions()[b] == [seen[b].index(i) for i in kept]  # absolute positions of the row
            assert int(cache.lengths.max()) <= sinks + window


def _h2o_reference(mha, x, budget, recent):
    kept, acc, outs = [], {}, []
    for t in range(x.shape[0]):
        kept.append(t)
        out, w = _attend(mha, x[kept], t, torch.tensor(kept), x[t])
        outs.append(out)
        for j, i in enumerate(kept):
            acc[i] = acc.get(i, 0.0) + float(w[:, j].sum())
        if len(kept) > budget:
            old = kept[:-recent]
            top = sorted(old, key=lambda i: -acc[i])[: budget - recent]
            kept = sorted(top) + kept[-recent:]
    return torch.stack(outs), kept


@torch.no_grad()
def test_h2o_cache_follows_its_rule():
    mha, T = _layer(1), 30
    x = torch.randn(1, T, D, dtype=torch.float64)
    ref_out, ref_kept = _h2o_reference(mha, x[0], budget=8, recent=3)
    cache = H2OCache(8, recent=3)
    with torch.no_grad():
        outs = torch.stack([_step(mha, cache, x, t)[0] for t in range(T)])
    torch.testing.assert_close(outs, ref_out, atol=1e-10, rtol=0)
    assert cache.kept_positions()[0] == ref_kept


def _pool(s, kernel):
    n, h = len(s), kernel // 2
    return np.array([s[max(0, j - h): j + h + 1].mean() for j in range(n)])


def _snapkv_reference(mha, x, budget, window, kernel):
    kept, obs, outs = [], [], []
    for t in range(x.shape[0]):
        kept.append(t)
        out, _ = _attend(mha, x[kept], t, torch.tensor(kept), x[t])
        outs.append(out)
        obs = (obs + [t])[-window:]
        if len(kept) > budget:
            _, k, _ = _proj(mha, x[kept], torch.tensor(kept))
            score = np.zeros(len(kept))
            for i in obs:
                q, _, _ = _proj(mha, x[i][None], torch.tensor([i]))
                s = (q @ k.transpose(-1, -2))[:, 0] / (D // H) ** 0.5  # (H, n)
                s = s.masked_fill(torch.tensor(kept)[None] > i, float("-inf"))
                score += torch.softmax(s, -1).sum(0).numpy()
            pooled = _pool(score, kernel)
            older = range(len(kept) - window)
            top = sorted(older, key=lambda j: -pooled[j])[: budget - window]
            kept = [kept[j] for j in sorted(top)] + kept[-window:]
    return torch.stack(outs), kept


@torch.no_grad()
def test_snapkv_cache_follows_its_rule():
    mha, T = _layer(2), 30
    x = torch.randn(1, T, D, dtype=torch.float64)
    ref_out, ref_kept = _snapkv_reference(mha, x[0], budget=9, window=3, kernel=3)
    cache = SnapKVCache(9, window=3, kernel=3)
    with torch.no_grad():
        outs = torch.stack([_step(mha, cache, x, t)[0] for t in range(T)])
    torch.testing.assert_close(outs, ref_out, atol=1e-10, rtol=0)
    assert cache.kept_positions()[0] == ref_kept


@pytest.mark.parametrize("kind,kw", [("sink", {"sinks": 4, "window": 60}), ("h2o", {"budget": 64}), ("snapkv", {"budget": 64, "window": 8}),
                                     ("quantized", {"bits": 8, "group": 64, "residual": 64})])
@pytest.mark.parametrize("kv_heads", [None, 2], ids=["mha", "gqa"])
def test_identical_to_dynamic_cache_when_nothing_is_evicted(kind, kw, kv_heads):
    mha, T = _layer(3, kv_heads), 40
    x = torch.randn(2, T, D, dtype=torch.float64)
    ok = torch.ones(2, T, dtype=torch.bool)
    ok[0, 5:9] = False
    a, b = make_cache(kind, **kw), DynamicCache()
    with torch.no_grad():
        out_a, _ = mha(x[:, :7], cache=a, causal=True, attention_mask=ok[:, :7].long())  # a prompt chunk, then steps
        out_b, _ = mha(x[:, :7], cache=b, causal=True, attention_mask=ok[:, :7].long())
        torch.testing.assert_close(out_a, out_b, atol=1e-12, rtol=0)
        for t in range(7, T):
            torch.testing.assert_close(_step(mha, a, x, t, ok[:, t]), _step(mha, b, x, t, ok[:, t]), atol=1e-12, rtol=0)


@pytest.mark.parametrize("cache", [SinkCache(4, 12), H2OCache(16, recent=5), SnapKVCache(16, window=4, kernel=5)], ids=repr)
def test_budget_never_exceeded_over_thousands_of_steps(cache):
    torch.manual_seed(0)
    B, Hkv, E = 3, 2, 4
    for t in range(2000):
        valid = torch.rand(B, 1) > 0.3  # rows advance at different rates
        cache.update(torch.randn(B, Hkv, 1, E), torch.randn(B, Hkv, 1, E), valid=valid)
        if hasattr(cache, "after_attention"):
            S = int(cache.lengths.max())
            res = type("R", (), {"key_scores": torch.rand(B, 2 * Hkv, S)})()
            cache.after_attention(torch.randn(B, 2 * Hkv, 1, E), cache.next_positions[:, None] - 1, valid, res)
        assert int(cache.lengths.max()) <= cache.budget
    assert all(len(p) == cache.budget for p in cache.kept_positions())  # every row filled up, then stayed at its budget


def _fp32_bytes(S, Hkv=4, E=64):
    return 2 * Hkv * S * E * 4


@pytest.mark.parametrize("bits,factor", [(8, 3.0), (4, 5.0)])
def test_quantized_bytes_and_deviation(bits, factor):
    torch.manual_seed(0)
    k, v = torch.randn(1, 4, 1024, 64), torch.randn(1, 4, 1024, 64)
    c = QuantizedCache(bits=bits, group=32, residual=32)
    view = c.update(k, v)
    assert _fp32_bytes(1024) / c.kv_nbytes >= factor
    err = (view.k - k).abs().max() / k.abs().max()
    assert err <= (0.01 if bits == 8 else 0.1)
    torch.testing.assert_close(view.k[:, :, -32:], k[:, :, -32:], atol=0, rtol=0)  # the residual is exact
    packed = c._blocks[0][0][0].codes
    assert packed.dtype == torch.uint8 and packed.shape[-1] == (64 if bits == 8 else 32)  # two 4-bit codes per byte


def test_quantized_matches_numpy_kivi_rule():
    torch.manual_seed(1)
    k, v = torch.randn(2, 2, 50, 8, dtype=torch.float64), torch.randn(2, 2, 50, 8, dtype=torch.float64)
    c = QuantizedCache(bits=4, group=8, residual=8)
    for t in range(50):
        view = c.update(k[:, :, t:t + 1], v[:, :, t:t + 1])
    nq = (50 - 8) // 8 * 8  # tokens quantized: whole blocks, leaving 8..15 in full precision
    for x, axis, got in ((k.numpy(), 2, view.k), (v.numpy(), 3, view.v)):
        ref = x.copy()
        for s in range(0, nq, 8):
            blk = x[:, :, s:s + 8]
            lo = blk.min(axis, keepdims=True).astype(np.float16).astype(np.float64)
            hi = blk.max(axis, keepdims=True).astype(np.float16).astype(np.float64)
            scale = ((hi - lo) / 15).astype(np.float16).astype(np.float64)
            code = np.clip(np.round((blk - lo) / np.where(scale > 0, scale, 1)), 0, 15)
            ref[:, :, s:s + 8] = code * scale + lo
        np.testing.assert_allclose(got.numpy(), ref, atol=1e-12)


def test_bad_arguments_name_the_fix():
    with pytest.raises(ValueError, match="sinks"):
        SinkCache(-1, 4)
    with pytest.raises(ValueError, match="recent"):
        H2OCache(8, recent=9)
    with pytest.raises(ValueError, match="window"):
        SnapKVCache(4, window=8)
    with pytest.raises(ValueError, match="bits"):
        QuantizedCache(bits=3)
    with pytest.raises(ValueError, match="kind"):
        make_cache("streaming")
