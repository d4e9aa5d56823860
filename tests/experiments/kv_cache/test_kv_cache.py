"""The ``kv_cache`` experiment: a tiny run decodes the same tokens with both caches as by recomputing
the prefix, a decoder whose cache changes the tokens is reported as such, the committed 1,024-token
benchmark is quoted from the folder the run names (and left out without one), and both languages render."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from attnkit.experiments import Results, get, run_experiment
from attnkit.experiments.kv_cache.experiment import _measure, committed_decoding


def test_tiny_run_same_tokens_and_both_languages(tmp_path):
    exp = get("kv_cache")
    doc = run_experiment("kv_cache", out=tmp_path / "run", overrides={**exp.tiny, "bench_results": None}, show_progress=False)
    res = doc["results"]
    assert [r["layers"] for r in res["rows"]] == exp.tiny["layers"] and res["n_tokens"] == exp.tiny["tokens"]
    for r in res["rows"]:
        assert r["same"] is True  # the cache is exact: greedy decoding picks the same tokens
        assert all(math.isfinite(r[k]) and r[k] > 0 for k in ("dynamic", "static", "recompute"))
    results = Results(res, tmp_path / "run", {})
    en, zh = (exp.report(results, tmp_path, lang).html for lang in ("en", "zh"))
    assert f"generated {res['n_tokens']} tokens greedily" in en and "identical" in en and "完全相同" in zh
    assert "decoding.json" not in en  # no folder of committed benchmarks: that part is left out


class _LyingCache(torch.nn.Module):
    """A decoder whose static cache returns other tokens than recomputing: the experiment must say so."""

    def __init__(self, **kw):
        super().__init__()

    def eval(self):
        return self

    def generate(self, prompt, n, cache=None, **kw):
        toks = torch.arange(n)[None]
        return toks + 1 if cache == "static" else toks


def test_a_cache_that_changes_the_tokens_is_reported():
    (row,) = _measure(_LyingCache, 4, (1,))
    assert row["same"] is False


def test_the_committed_benchmark_is_read_from_the_named_folder(tmp_path):
    assert committed_decoding(None) == {} and committed_decoding(tmp_path) == {}
    models = {"gpt2_like": {"dynamic": {"tokens_per_s": 120.0}, "recompute": {"tokens_per_s": 7.5}, "note": "x"}}
    (tmp_path / "decoding.json").write_text(json.dumps({"models": models}))
    got = committed_decoding(tmp_path)
    assert got == {"committed": [{"model": "gpt2_like", "dynamic": 120.0, "recompute": 7.5}], "committed_png": None, "growth": []}
    exp = get("kv_cache")
    res = {"n_tokens": 4, "threads": 1, "rows": [{"layers": 1, "dynamic": 8.0, "static": 8.0, "recompute": 2.0, "same": True}],
           "bench_results": str(tmp_path)}
    html = exp.report(Results(res, tmp_path, {}), tmp_path, "en").html
    assert "1,024 tokens: tokens per second of each model (committed <code>decoding.json</code>)" in html and "gpt2 like" in html and "120.0" in html
    assert exp.summary(res, "en")[0] == "KV cache 4.0× faster at 4 tokens, same tokens: yes"


def test_the_committed_benchmark_figure_is_drawn_from_its_numbers_in_both_languages(tmp_path):
    """decoding.json's per-token times become the figure's lines (a centred rolling median, checked
    against NumPy), drawn beside the page in English and, in zh/, Chinese."""
    import matplotlib.pyplot as plt
    import numpy as np

    from attnkit.experiments.kv_cache.plots import WINDOW, decoding_figure
    from attnkit.page.figures import cjk_font, zh_path

    rng = np.random.default_rng(0)
    per_token = {v: (rng.random(80) + i).tolist() for i, v in enumerate(("recompute", "dynamic", "static", "sdpa_raw"))}
    models = {"1_layer": {v: {"tokens_per_s": 10.0 * (i + 1), "per_token_ms": ms} for i, (v, ms) in enumerate(per_token.items())}}
    (tmp_path / "decoding.json").write_text(json.dumps({"models": models}))
    h = WINDOW // 2
    for lang in ("en", "zh"):
        fig = decoding_figure({"models": models}, lang)
        lines = fig.axes[0].get_lines()
        assert len(lines) == 4
        for line, ms in zip(lines, per_token.values()):
            x = np.array(ms[1:])
            want = [np.median(x[max(0, i - h): i + h + 1]) for i in range(len(x))]
            np.testing.assert_allclose(line.get_ydata(), want)
        plt.close(fig)
    got = committed_decoding(tmp_path, tmp_path / "page")
    png = Path(got["committed_png"])
    assert png.parent == tmp_path / "page" and png.is_file()
    if cjk_font() is not None:
        assert zh_path(png).is_file() and zh_path(png).read_bytes() != png.read_bytes()
        res = {"n_tokens": 4, "threads": 1, "rows": [{"layers": 1, "dynamic": 8.0, "static": 8.0, "recompute": 2.0, "same": True}],
               "bench_results": str(tmp_path)}
        html = get("kv_cache").report(Results(res, tmp_path, {}), tmp_path / "report", "zh").html
        assert 'data-figure-lang="zh"' in html and "figure-en" not in html
