"""Cost-model dispatch: auto keeps SDPA where it is the fast fused kernel, takes blockwise where a
mask or bias would cost SDPA a dense (L, S) tensor, honours memory budgets, and explains itself.
Only the decision is tested (estimates on large shapes cost no compute); timings live in
benchmarks/attention.py."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch

import attnkit
from attnkit import biases as Bi
from attnkit import masks as M
from attnkit.core import cost, registry
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


RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def _rates_run() -> dict:
    return json.loads((RESULTS / "bf16_rates.json").read_text(encoding="utf-8"))


def _clear_winners() -> list[tuple[str, str, str]]:
    """(dtype, mask, faster backend) wherever the committed rates run has one backend >= 1.3x faster."""
    run = _rates_run()["half_rates"]
    return [(*key.split("/"), w["faster"]) for key, w in sorted(run["faster"].items()) if w["by"] >= 1.3]


def _same_cpu_kind_or_skip(features: dict):
    # SDPA's bf16/fp16 speed is the CPU's (AMX tiles, AVX512-FP16); the model reads the same flags
    here = {name: cost.cpu_has(name) for name in features}
    if here != features:
        pytest.skip(f"the committed rates were measured on a CPU with {features}, this one has {here}")


@pytest.mark.parametrize("dtype,mask,faster", _clear_winners())
def test_auto_picks_the_backend_the_committed_rates_run_measured_faster(dtype, mask, faster):
    # benchmarks/bf16_rates.py --label half_rates: sdpa vs blockwise, interleaved in one process;
    # no timing here, only the cost model's choice against the committed ranking
    run = _rates_run()
    _same_cpu_kind_or_skip(run["meta"]["cpu_features"])
    n = run["meta"]["shape"]["n"]
    call = make_call(*_qkv(n, getattr(torch, dtype)), mask=M.causal() if mask == "causal" else None)
    b, rep = choose(call, "auto")
    assert b.name == faster, rep.estimates


def test_auto_picks_the_faster_backend_of_the_committed_bf16_dense_row():
    # the must suite's "no mask, n=4k, bf16" row (attention.json), if measured on this CPU's kind
    doc = json.loads((RESULTS / "attention.json").read_text(encoding="utf-8"))
    rates = _rates_run()
    if doc["machine"]["platform"] != rates["meta"]["platform"]:
        pytest.skip("attention.json and bf16_rates.json come from different machines")
    _same_cpu_kind_or_skip(rates["meta"]["cpu_features"])
    row = doc["summary"]["bf16_dense_4k"]
    faster = "blockwise" if row["speedup"] > 1 else "sdpa"
    if max(row["speedup"], 1 / row["speedup"]) < 1.3:
        pytest.skip(f"no clear winner in attention.json (blockwise {row['speedup']:.2f}x sdpa)")
    b, rep = choose(make_call(*_qkv(4096, torch.bfloat16)), "auto")
    assert b.name == faster, rep.estimates


def test_sdpa_half_rates_follow_the_cpu_features():
    sdpa = cost.RATES["sdpa_flops"]
    assert (sdpa[torch.bfloat16] > 2 * sdpa[torch.float32]) == cost.cpu_has("amx")  # AMX: 2.76x measured
    assert (sdpa[torch.float16] > sdpa[torch.float32] / 2) == cost.cpu_has("fp16")  # else ~3 GFLOP/s
    with pytest.raises(ValueError, match="probe must be one of"):
        cost.cpu_has("avx")


@pytest.mark.parametrize("n", [1024, 4096, 16384])
def test_auto_never_takes_the_dense_reference_for_half_precision(n):
    # with stale fp16 rates (SDPA and blockwise both at ~4 GFLOP/s) auto chose reference, which holds
    # four (B, H, L, S) fp32 tensors: 8 GiB at n = 16k
    for dtype in (torch.bfloat16, torch.float16):
        for mask in (None, M.causal()):
            b, rep = choose(make_call(*_qkv(n, dtype), mask=mask), "auto")
            assert b.name in ("sdpa", "blockwise"), (dtype, rep.estimates)


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


def _no_estimate(priority):
    return registry.register("no_estimate", lambda call: None, supports=lambda call: None, priority=priority)


def test_a_backend_without_an_estimate_leaves_the_cost_model_on_for_the_others():
    _no_estimate(1)  # less preferred than sdpa and blockwise
    try:
        b, rep = choose(make_call(*_qkv(4096), mask=M.sliding_window(255, 0)), "auto")
        assert b.name == "blockwise"  # the cost model still decides between the estimated backends
        assert set(rep.estimates) == {"sdpa", "blockwise", "reference"}
        assert "lowest estimated time" in rep.reason
        assert "no cost estimate" in rep.rejected["no_estimate"] and "estimated" in rep.rejected["sdpa"]
    finally:
        registry.unregister("no_estimate")


def test_a_backend_without_an_estimate_preferred_by_priority_wins():
    _no_estimate(20)  # more preferred than every built-in
    try:
        b, rep = choose(make_call(*_qkv(4096), mask=M.sliding_window(255, 0)), "auto")
        assert b.name == "no_estimate"
        assert "no cost estimate" in rep.reason and "blockwise" in rep.reason  # names the cost model's choice
        assert "blockwise is" not in rep.rejected["sdpa"] and "no_estimate is preferred" in rep.rejected["blockwise"]
    finally:
        registry.unregister("no_estimate")


def test_without_any_estimate_priority_decides():
    from attnkit.core import cost

    lo = registry.Backend("lo", lambda call: None, lambda call: None, priority=1)
    hi = registry.Backend("hi", lambda call: None, lambda call: None, priority=2)
    best, explain = cost.rank([hi, lo], {}, None)
    why, rejected = explain()
    assert best is hi and why == "most preferred backend that supports the call" and "hi is preferred" in rejected["lo"]


def test_reasons_are_built_only_when_the_report_is_read(monkeypatch):
    from attnkit.core import cost

    calls = []
    describe = cost.describe
    monkeypatch.setattr(cost, "describe", lambda e: calls.append(e) or describe(e))
    res = attnkit.attention(*_qkv(16))
    assert res.report.backend == "sdpa" and calls == []  # nothing formatted on the call itself
    text = str(res.report)
    assert len(calls) == 3 and "lowest estimated time" in res.report.reason and "not blockwise: estimated" in text
    res.report.reason += "; appended"
    assert res.report.reason.endswith("; appended") and res.report.rejected["reference"].startswith("estimated")
    unread = attnkit.attention(*_qkv(16)).report
    copied = pickle.loads(pickle.dumps(unread))  # pickles the sentences, not the closure building them
    assert copied.reason == unread.reason and copied.rejected == unread.rejected


def test_report_lists_estimates_and_reason():
    res = attnkit.attention(*_qkv(256), mask=M.sliding_window(15, 0))
    text = str(res.report)
    assert res.report.backend in ("sdpa", "blockwise") and "ms" in text and "MiB" in text


def test_estimates_are_cheap_and_skip_aware():
    q, k, v = _qkv(16384)
    estimate = registry.get("blockwise").estimate  # each backend owns its estimate
    dense = estimate(make_call(q, k, v))
    doc = estimate(make_call(q, k, v, mask=M.document(torch.arange(16384) // 1024)))
    assert doc["time_s"] < dense["time_s"] / 5  # 16 documents: ~1/16 of the tiles


class _Declared(Bi.CustomBias):
    """A custom bias that describes itself: a relative, costly one."""

    relative = True
    cost_per_element = 200.0


def test_biases_are_costed_by_what_they_declare_not_their_class():
    q, k, v = _qkv(4096)
    fn = lambda b, h, qi, ki: (ki - qi).float()  # noqa: E731  (relative in fact)
    est = {name: registry.get(name).estimate for name in ("sdpa", "blockwise", "reference")}
    plain = Bi.CustomBias(fn, depends_on=())
    costly = Bi.CustomBias(fn, depends_on=())
    costly.cost_per_element = 200.0  # an instance may say so too
    for name, e in est.items():
        assert e(make_call(q, k, v, bias=costly))["time_s"] > e(make_call(q, k, v, bias=plain))["time_s"], name
    # declared relative: blockwise evaluates it once per tile diagonal, so it costs blockwise far less
    declared, undeclared = _Declared(fn, depends_on=()), costly
    b_rel = est["blockwise"](make_call(q, k, v, bias=declared))["time_s"]
    b_abs = est["blockwise"](make_call(q, k, v, bias=undeclared))["time_s"]
    assert b_rel < b_abs / 2
    assert est["sdpa"](make_call(q, k, v, bias=declared)) == est["sdpa"](make_call(q, k, v, bias=undeclared))
    summed = Bi.SumOfModifiers([Bi.ALiBi(8), declared])
    assert summed.relative and summed.cost_per_element == Bi.ALiBi.cost_per_element + 200.0
    assert not Bi.SumOfModifiers([Bi.ALiBi(8), plain]).relative


def test_scores_declare_their_dot_form():
    from attnkit import scores as Sc

    class Scaled(Sc.Score):  # a user score with a dot form: q' = 2 q
        def as_dot(self, q, k):
            return 2 * q, k

    assert Scaled().dot_form and Sc.DotScore().dot_form and Sc.CosineScore().dot_form and Sc.GeneralScore(4).dot_form
    assert not Sc.AdditiveScore(4).dot_form
    q, k, v = _qkv(32)
    b, _ = choose(make_call(q, k, v, score=Scaled()), "auto")
    assert b.name == "sdpa"  # fused kernels serve any declared dot form
    b, rep = choose(make_call(q, k, v, score=Sc.AdditiveScore(64, 16)), "auto")
    assert b.name != "sdpa" and "dot-product form" in rep.rejected["sdpa"]
    wide = registry.get("reference").estimate(make_call(q, k, v, score=Sc.AdditiveScore(64, 256)))
    narrow = registry.get("reference").estimate(make_call(q, k, v, score=Sc.AdditiveScore(64, 16)))
    assert wide["time_s"] > narrow["time_s"]  # costed by its hidden size


def test_blockwise_evaluates_a_declared_relative_bias_once_per_diagonal():
    from attnkit.backends.blockwise import blockwise_attention

    calls = []

    def fn(b, h, qi, ki):  # relative in fact: depends on key − query only
        calls.append(1)
        return -0.1 * (ki - qi).abs().double()

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 32, 8, generator=g, dtype=torch.float64) for _ in range(3))
    counts, outs = {}, {}
    for name, bias in (("declared", _Declared(fn, depends_on=())), ("plain", Bi.CustomBias(fn, depends_on=()))):
        call = make_call(q, k, v, bias=bias)
        calls.clear()
        with torch.no_grad():  # under autograd one more tiny evaluation checks which tensors the bias reads
            outs[name] = blockwise_attention(call, block_q=8, block_kv=8).out
        counts[name] = len(calls)
    want = attnkit.attention(q, k, v, bias=Bi.CustomBias(fn, depends_on=()), backend="reference").out
    for out in outs.values():
        torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    assert counts["plain"] == 16 and counts["declared"] == 7  # 4 × 4 tiles; 2·4 − 1 diagonals


def test_each_builtin_backend_registers_its_own_run_supports_and_estimate():
    from attnkit.backends import blockwise, reference, sdpa

    for module in (sdpa, blockwise, reference):
        b = registry.get(module.__name__.rsplit(".", 1)[-1])
        assert (b.run, b.supports, b.estimate) == (module.run, module.supports, module.estimate)
        assert b.estimate.__module__.startswith(module.__name__)  # defined with the backend, not in the core
