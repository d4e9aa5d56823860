"""Cost-model dispatch: auto keeps SDPA where it is the fast fused kernel, takes blockwise where a
mask or bias would cost SDPA a dense (L, S) tensor, honours memory budgets, and explains itself.
Only the decision is tested (estimates on large shapes cost no compute); timings live in
benchmarks/attention.py."""

from __future__ import annotations

import pytest
import torch

import attnkit
from attnkit import biases as Bi
from attnkit import masks as M
from attnkit.core import registry
from attnkit.core.call import make_call
from attnkit.core.dispatch import choose


def _qkv(n, dtype=torch.float32):
    q = torch.zeros(1, 8, n, 64, dtype=dtype)
    return q, q, q


@pytest.mark.parametrize("n", [1024, 4096, 16384])
@pytest.mark.parametrize("mask", [None, "causal"])
def test_auto_keeps_sdpa_for_plain_and_causal_fp32(n, mask):
    b, rep = choose(make_call(*_qkv(n), mask=M.causal() if mask else None), "auto")
    assert b.name == "sdpa"
    assert set(rep.estimates) == {"sdpa", "blockwise", "reference"}
    assert "linear" in rep.rejected and "approximate" in rep.rejected["linear"]


@pytest.mark.parametrize("n", [4096, 16384])
def test_auto_takes_blockwise_for_a_sliding_window(n):
    b, rep = choose(make_call(*_qkv(n), mask=M.sliding_window(255, 0)), "auto")
    assert b.name == "blockwise"
    assert rep.estimates["blockwise"]["time_s"] * 5 < rep.estimates["sdpa"]["time_s"]
    if n == 16384:  # the dense (L, S) bool mask dominates
        assert rep.estimates["blockwise"]["bytes"] * 5 < rep.estimates["sdpa"]["bytes"]
    assert "estimated" in rep.rejected["sdpa"]


def test_memory_budget_global_and_per_call():
    q, k, v = _qkv(8192)
    call = make_call(q, k, v, bias=Bi.ALiBi(8))
    est = choose(call, "auto")[1].estimates
    assert est["sdpa"]["bytes"] > 1e9 > 1e8 > est["blockwise"]["bytes"]  # a dense (1, H, L, S) bias
    try:
        attnkit.set_memory_budget(2**28)  # 256 MiB
        b, rep = choose(call, "auto")
        assert b.name == "blockwise" and "budget" in rep.reason and "over memory budget" in rep.rejected["sdpa"]
    finally:
        attnkit.set_memory_budget(None)
    b, rep = choose(make_call(q, k, v, bias=Bi.ALiBi(8), memory_budget=2**28), "auto")
    assert b.name == "blockwise"
    b, rep = choose(make_call(q, k, v, bias=Bi.ALiBi(8), memory_budget=1), "auto")
    assert b.name == "blockwise" and "nothing fits" in rep.reason  # smallest memory wins


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "1GB"])
def test_bad_budgets_raise(bad):
    with pytest.raises(ValueError, match="budget"):
        attnkit.set_memory_budget(bad)
    q, k, v = _qkv(16)
    with pytest.raises(ValueError, match="memory_budget"):
        attnkit.attention(q, k, v, memory_budget=bad)


def test_forced_backend_that_cannot_serve_raises_with_reason():
    q, k, v = _qkv(16)
    with pytest.raises(ValueError, match="weights"):
        attnkit.attention(q, k, v, backend="sdpa", return_weights=True)
    res = attnkit.attention(q, k, v, backend="blockwise", return_weights=True)
    assert res.weights.shape == (1, 8, 16, 16)
    assert attnkit.attention(q, k, v, return_weights=True).report.backend in ("blockwise", "reference")


def test_without_estimates_priority_decides():
    registry.register("no_estimate", lambda call: None, supports=lambda call: None, priority=1)
    try:
        b, rep = choose(make_call(*_qkv(64)), "auto")
        assert b.name == "sdpa" and rep.reason == "most preferred backend that supports the call"
    finally:
        registry.unregister("no_estimate")


def test_report_lists_estimates_and_reason():
    res = attnkit.attention(*_qkv(256), mask=M.sliding_window(15, 0))
    text = str(res.report)
    assert res.report.backend in ("sdpa", "blockwise") and "ms" in text and "MiB" in text


def test_estimates_are_cheap_and_skip_aware():
    from attnkit.core import cost

    q, k, v = _qkv(16384)
    dense = cost.estimate_blockwise(make_call(q, k, v))
    doc = cost.estimate_blockwise(make_call(q, k, v, mask=M.document(torch.arange(16384) // 1024)))
    assert doc["time_s"] < dense["time_s"] / 5  # 16 documents: ~1/16 of the tiles
