"""The ``cost`` experiment: attnkit's reported dense bytes match the formula, linear attention's error
matches a NumPy float64 computation of both attentions, ``auto``'s reasons read in Chinese, the quick
benchmark is quoted from the committed folder (measured only when none is found), and both languages render."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attnkit.experiments import Results, get, run_experiment
from attnkit.experiments.cost import experiment as cost
from attnkit.experiments.cost.bench import memory_ratio, quick_rows
from attnkit.experiments.cost.calls import example_calls, reason


def _softmax_attention(q, k, v):
    s = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])  # (B, H, L, S)
    w = np.exp(s - s.max(-1, keepdims=True))
    return (w / w.sum(-1, keepdims=True)) @ v


def _linear_attention(q, k, v):
    phi = lambda x: np.where(x > 0, x + 1, np.exp(x))  # noqa: E731  elu(x) + 1
    fq, fk = phi(q), phi(k)  # (B, H, L, E), (B, H, S, E)
    kv = fk.swapaxes(-1, -2) @ v  # (B, H, E, Ev)
    return (fq @ kv) / (fq @ fk.sum(-2)[..., None])


def test_linear_error_matches_numpy_float64():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 48, 8, generator=g) for _ in range(3))
    exact = _softmax_attention(*(t.double().numpy() for t in (q, k, v)))
    lin = _linear_attention(*(t.double().numpy() for t in (q, k, v)))
    want = np.linalg.norm(lin - exact) / np.linalg.norm(exact)
    assert 0.1 < want < 2  # a different function, not a rounding of the same one
    assert cost.linear_error(q, k, v) == pytest.approx(want, rel=1e-4)  # float32 against float64: far below 1e-4


def test_tiny_run_numbers(tmp_path):
    exp = get("cost")
    doc = run_experiment("cost", out=tmp_path, overrides={**exp.tiny, "bench_results": None}, show_progress=False)
    res = doc["results"]
    assert res["reference_bytes_256"] == res["formula_256"] == 1 * 8 * 256 * 256 * 4
    assert res["dense"] == [[n, 8 * n * n * 4] for n in (1024, 4096, 16384, 65536)]
    assert res["linear_n"] == exp.tiny["linear_n"] and 0.1 < res["linear_rel_err"] < 2
    assert [a["call"] for a in res["auto"]] == [name for name, _ in example_calls()]
    assert all(a["ran"] and a["why"] for a in res["auto"])
    assert "quick_rows" not in res  # the tiny size measures no benchmark
    results = Results(res, tmp_path, {})
    en, zh = (exp.report(results, tmp_path, lang).html for lang in ("en", "zh"))
    assert f"differs from exact softmax attention by {100 * res['linear_rel_err']:.0f} %" in en
    assert f"相差 {100 * res['linear_rel_err']:.0f} %" in zh and "quick benchmark" not in en


def _quick_result() -> dict:
    row = {"mask": "causal", "bias": "none", "chosen": "sdpa", "peak_mib": 1.0}
    return {"rows": [{**row, "backend": "sdpa", "median_ms": 10.0}, {**row, "backend": "blockwise", "median_ms": 5.0},
                     {**row, "backend": "reference", "skipped": "too large"}]}


def test_quick_rows_give_speed_against_sdpa():
    rows = quick_rows(_quick_result())
    assert rows == [["causal/none", "sdpa", "sdpa", "10.0", "1.0", "–"], ["causal/none", "blockwise", "sdpa", "5.0", "1.0", "2.00×"]]


def test_the_benchmark_is_quoted_when_committed_and_measured_only_when_not(tmp_path, monkeypatch):
    import attnkit.bench

    exp = get("cost")
    committed = tmp_path / "bench"
    committed.mkdir()
    (committed / "attention_quick.json").write_text(json.dumps(_quick_result()))
    monkeypatch.setattr(attnkit.bench, "run_bench", lambda **kw: pytest.fail("a committed result exists: nothing to measure"))
    doc = run_experiment("cost", out=tmp_path / "a", overrides={"linear_n": 32, "bench_results": str(committed)}, show_progress=False)
    assert "quick_rows" not in doc["results"]
    html = exp.report(Results(doc["results"], tmp_path / "a", {}), tmp_path / "report", "en").html
    assert "The quick benchmark, row by row" in html and "2.00×" in html and "attention_quick.json" in html

    calls = []
    monkeypatch.setattr(attnkit.bench, "run_bench", lambda **kw: calls.append(kw) or _quick_result())
    doc = run_experiment("cost", out=tmp_path / "b", overrides={"linear_n": 32, "bench_results": str(tmp_path / "none")}, show_progress=False)
    assert len(calls) == 1 and calls[0]["quick"] is True
    assert doc["results"]["quick_source"] == "measured now" and doc["results"]["quick_rows"][1][-1] == "2.00×"


@pytest.mark.parametrize("lang, want", [("en", "lowest estimated time (0.12 ms, 3 tiles)"), ("zh", "估计时间最短（0.12 毫秒，3 tiles）")])
def test_dispatch_reasons_read_in_the_page_language(lang, want):
    assert reason("lowest estimated time (0.12 ms, 3 tiles)", lang) == want


@pytest.mark.parametrize("ratio, text", [(0.029, "1/34"), (0.5, "1/2"), (3.6, "3.6×"), (1.0, "1.0×")])
def test_memory_ratio_reads_both_ways(ratio, text):
    assert memory_ratio(ratio) == text


def test_the_quick_benchmark_figure_is_drawn_from_its_json_in_both_languages(tmp_path):
    """The page's quick-benchmark figure is drawn from the committed JSON (not the English PNG beside
    it): bars of exactly the measured medians and peaks, English text on one copy, Chinese on the other."""
    import re

    import matplotlib.pyplot as plt

    from attnkit.experiments.cost.quick_figure import quick_figure
    from attnkit.page.figures import cjk_font, zh_path

    result = _quick_result()
    for lang in ("en", "zh"):
        fig = quick_figure(result, lang)
        heights = [[p.get_height() for p in ax.patches] for ax in fig.axes[:2]]
        assert heights == [[10.0, 5.0], [1.0, 1.0]]  # sdpa then blockwise; the skipped reference has no bar
        text = " ".join(t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text") and hasattr(a, "get_fontname")))
        assert bool(re.search(r"[\u3400-\u9fff]", text)) == (lang == "zh"), lang
        plt.close(fig)
    committed = tmp_path / "bench"
    committed.mkdir()
    (committed / "attention_quick.json").write_text(json.dumps(result))
    res = {**cost.measure(32, 0), "bench_results": str(committed)}
    pages = {lang: get("cost").report(Results(res, tmp_path / "run", {}), tmp_path / "report", lang).html for lang in ("en", "zh")}
    (png,) = (tmp_path / "report" / "figures" / "cost").glob("quick-*.png")
    assert 'data-figure-lang="en"' in pages["en"]
    if cjk_font() is not None:
        assert zh_path(png).is_file() and zh_path(png).read_bytes() != png.read_bytes()
        assert 'data-figure-lang="zh"' in pages["zh"] and "figure-en" not in pages["zh"]


@pytest.mark.parametrize("lang, want", [("en", "sliding256/alibi"), ("zh", "滑动窗口 256/ALiBi")])
def test_benchmark_calls_are_named_in_the_page_language(lang, want):
    from attnkit.experiments.cost.quick_figure import call_name

    assert call_name("sliding256/alibi", lang) == want


def test_every_reason_of_the_typical_calls_reads_in_chinese():
    """The reasons ``auto`` gives for the nine typical calls leave no English phrase on the Chinese page."""
    import re

    from attnkit import attention

    qa = torch.randn(2, 4, 64, 16)
    for name, kw in example_calls(64):
        why = reason(attention(qa, qa, qa, **kw).report.reason, "zh")
        assert not re.search(r"[a-z]{3,} [a-z]{3,}", why.replace("Python", "")), (name, why)
