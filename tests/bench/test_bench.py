"""The benchmark machinery (not its speed): a measurement runs in a fresh subprocess and reports
what ran, the headline summary reads rows correctly, skips say why, and both plots draw."""

from __future__ import annotations

import json

import pytest

from attnkit.bench import harness as bench


def _spec(**kw):
    return {**dict(n=128, dtype="float32", mask="sliding256", bias="alibi", backend="auto", mode="fwd", runs=2, tag="t"), **kw}


def test_a_measurement_in_a_fresh_process_reports_time_memory_and_choice():
    r = bench._spawn(_spec(), timeout=120)
    assert "error" not in r, r
    assert r["median_ms"] > 0 and len(r["times_ms"]) == 2 and r["chosen"] in ("sdpa", "blockwise", "reference")
    assert r["peak_mib"] >= 0 and r["inputs_mib"] == pytest.approx(3 * 8 * 128 * 64 * 4 / 2**20)


def test_the_sdpa_baseline_and_training_mode_run():
    r = bench.worker(_spec(backend="sdpa", mode="fwdbwd", mask="document", bias="t5"))
    assert r["chosen"] == "sdpa" and r["median_ms"] > 0


def test_skips_name_their_reason():
    assert "linear attention serves only" in bench._skip_reason(_spec(backend="linear"))
    assert "12 GiB" in bench._skip_reason(_spec(backend="sdpa", n=32768))
    assert bench._skip_reason(_spec(backend="blockwise", n=32768)) is None


def test_unknown_suite_is_a_value_error():
    with pytest.raises(ValueError, match="suite must be one of"):
        bench.suite_specs("everything")


def _row(tag, backend, ms, mib, **kw):
    base = dict(n=16384, dtype="float32", mask="sliding256", bias="none", mode="fwd", chosen=backend)
    return {**base, **kw, "tag": tag, "backend": backend, "median_ms": ms, "peak_mib": mib}


def test_summary_computes_the_headline_ratios():
    rows = [
        _row("window16k", "sdpa", 5000.0, 1300.0),
        _row("window16k", "blockwise", 200.0, 40.0),
        _row("window16k", "auto", 210.0, 41.0, chosen="blockwise"),
        _row("linear_crossover", "linear", 10.0, 1.0, n=1024, mask="causal"),
        _row("linear_crossover", "sdpa", 12.0, 1.0, n=1024, mask="causal"),
        _row("linear_crossover", "linear", 5.0, 1.0, n=512, mask="causal"),
        _row("linear_crossover", "sdpa", 4.0, 1.0, n=512, mask="causal"),
        {**_spec(tag="window16k", backend="reference"), "skipped": "too big"},
    ]
    s = bench.summarize(rows)
    w = s["window256_16k_fp32"]
    assert w["speedup"] == pytest.approx(25.0) and w["memory_ratio"] == pytest.approx(40 / 1300)
    assert s["alibi_8k_fp32"] is None  # not measured: None, not a crash
    assert s["linear_faster_from_n"] == 1024
    assert [a["auto_over_sdpa"] for a in s["auto_vs_sdpa"]] == [pytest.approx(210 / 5000)]


def test_both_plots_draw(tmp_path):
    pytest.importorskip("matplotlib")
    from attnkit.bench.plot import plot

    rows = [_row("full", be, ms, mib, n=n, mask=m) for n in (1024, 4096) for m in ("none", "causal")
            for be, ms, mib in (("sdpa", 10.0, 5.0), ("blockwise", 8.0, 3.0), ("auto", 8.0, 3.0))]
    for suite in ("full", "quick"):
        result = {"suite": suite, "rows": rows, "machine": {"torch": "x", "cpus": 2}}
        plot(result, tmp_path / f"{suite}.png")
        assert (tmp_path / f"{suite}.png").stat().st_size > 10_000
    json.dumps(rows)  # rows stay JSON-serialisable


def test_auto_choices_compare_forced_backends_not_the_auto_row():
    rows = [_row("full", "sdpa", 10.0, 1.0), _row("full", "blockwise", 8.0, 1.0),
            _row("full", "auto", 50.0, 1.0, chosen="blockwise"),  # a noisy auto run does not count
            _row("full", "sdpa", 10.0, 1.0, n=1024), _row("full", "blockwise", 12.0, 1.0, n=1024),
            _row("full", "auto", 12.0, 1.0, n=1024, chosen="blockwise")]
    a = bench.auto_choices(rows)
    assert (a["configs"], a["chose_fastest"], a["within_1_10"]) == (2, 1, 1)
    assert a["misses"][0]["n"] == 1024 and a["misses"][0]["chosen_over_fastest"] == pytest.approx(1.2)
