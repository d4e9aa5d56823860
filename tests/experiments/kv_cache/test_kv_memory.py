"""The KV-cache memory formula the report prints (MHA, GQA, MQA) equals the bytes attnkit's cache holds,
and MLA's follows DeepSeek-V2's sizes (arXiv:2405.04434: d_c = 512, d_R = 64 for E = 128)."""

from __future__ import annotations

from attnkit.experiments.kv_cache.memory import formula_bytes, measure, mla_bytes


def test_the_formula_is_the_caches_own_byte_count():
    rows = measure(tokens=12, dim=64, heads=8)
    assert [r["kv_heads"] for r in rows] == [8, 2, 1]  # MHA, GQA (H/4), MQA
    for r in rows:
        assert r["measured"] == r["formula"] == 2 * 12 * r["kv_heads"] * 8 * 4
    assert rows[0]["measured"] == 8 * rows[2]["measured"]  # MQA keeps one head of K and V instead of eight


def test_mla_uses_deepseek_v2_sizes():
    assert mla_bytes(1, 128) == (512 + 64) * 4
    assert mla_bytes(1000, 128) / formula_bytes(1000, 128, 128) == (512 + 64) / (2 * 128 * 128)
