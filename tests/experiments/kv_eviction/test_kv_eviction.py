"""The ``kv_eviction`` experiment: its step-by-step evaluation equals the model's own forward where
nothing is evicted, each policy keeps what its rule says, and a tiny run (on a synthetic text, so
no Bible is needed) writes every key the issue names and renders in both languages."""

from __future__ import annotations

import random

import pytest
import torch
from torch.nn import functional as F

from attnkit.experiments import Results, get, run_experiment
from attnkit.experiments.kv_eviction import experiment as X
from attnkit.experiments.kv_eviction.evaluate import recompute_nll, stepwise_nll
from attnkit.experiments.kv_eviction.model import CharLM
from attnkit.experiments.kv_eviction.policies import KeptKV, Policy
from attnkit.experiments.kv_eviction.section import render

KEYS = {"dense", "window", "sink_window", "window_recompute", "h2o", "snapkv", "quantized8", "quantized4"}


@pytest.fixture(scope="module")
def model_and_streams():
    torch.manual_seed(0)
    m = CharLM(20, dim=32, heads=4, layers=2).double().eval()
    s = torch.randint(2, 20, (2, 70))
    s[:, 0] = 0
    return m, s


def _forward_nll(m, s):
    return F.cross_entropy(m(s[:, :-1]).transpose(1, 2), s[:, 1:], reduction="none")


def test_dense_steps_equal_the_causal_forward(model_and_streams):
    m, s = model_and_streams
    torch.testing.assert_close(stepwise_nll(m, s, Policy("dense"))["nll"].double(), _forward_nll(m, s).detach(), atol=1e-6, rtol=0)  # NLL kept in float32
    # a budget the stream never reaches evicts nothing
    torch.testing.assert_close(stepwise_nll(m, s, Policy("sink_window", budget=100, sinks=4))["nll"], stepwise_nll(m, s, Policy("dense"))["nll"])


def test_recompute_reads_each_window_fresh(model_and_streams):
    m, s = model_and_streams
    nll = recompute_nll(m, s, 16)
    for t in (3, 15, 40, 68):
        ref = F.cross_entropy(m(s[:, max(0, t - 15): t + 1])[:, -1], s[:, t + 1], reduction="none")
        torch.testing.assert_close(nll[:, t].double(), ref.detach(), atol=1e-6, rtol=0)


def test_each_policy_keeps_its_rule(model_and_streams):
    m, s = model_and_streams
    sw = stepwise_nll(m, s, Policy("sink_window", budget=10, sinks=3), trace_steps=69)["trace"]
    assert all(kept == list(range(3)) + list(range(t - 6, t + 1)) for t, kept in enumerate(sw) if t >= 10)
    win = stepwise_nll(m, s, Policy("window", budget=10), trace_steps=69)["trace"]
    assert all(kept == list(range(t - 9, t + 1)) for t, kept in enumerate(win) if t >= 10)
    # H2O: the recent half always, the rest by accumulated attention (a float64 replay of the rule)
    h2o = Policy("h2o", budget=8, recent=4)
    kv = KeptKV(h2o)
    kv.k = torch.randn(1, 1, 9, 4)
    kv.acc = torch.tensor([[[5.0, 0.1, 3.0, 0.2, 4.0, 9.0, 0.0, 0.0, 0.0]]])
    assert h2o.keep(kv)[0, 0].tolist() == [0, 2, 3, 4, 5, 6, 7, 8]  # slot 1 (0.1) is the lightest of the older five
    for name, (pol, obs) in X.policies(12, {"residual": 4, "group": 4, "kernel": 3}).items():
        assert stepwise_nll(m, s, pol, obs=obs)["max_kept"] <= 12, name


def _fake_bible(cache_dir, books=None):
    rnd = random.Random(0)
    words = ["and", "the", "lord", "said", "unto", "him", "behold", "light", "day", "night"]
    text = " ".join(rnd.choice(words) for _ in range(3000))
    starts = [i for i, c in enumerate(text) if c == " "][:500]
    return text, text[::-1], starts


def test_tiny_run_has_every_key_and_renders(tmp_path, monkeypatch):
    monkeypatch.setattr(X, "bible_texts", _fake_bible)
    exp = get("kv_eviction")
    own = tmp_path / "mine.txt"  # --data: the user's own text is the evaluation stream
    own.write_text("In the beginning was the word, and the word was with God. " * 10, encoding="utf-8")
    doc = run_experiment("kv_eviction", out=tmp_path / "run", overrides={**exp.tiny, "data": str(own)}, seeds=2, show_progress=False)
    res = doc["results"]
    assert res["text"] == str(own)
    assert set(res["perplexity_last_bin"]) == KEYS and res["n_seeds"] == 2
    assert all(res["policies"][p][b]["max_kept"] <= int(b) for p in KEYS - {"dense"} for b in res["policies"][p])
    for f in ("perplexity_vs_position.png", "kept_positions.png", "sink.png", "tradeoff.png"):
        assert (tmp_path / "run" / f).is_file()
    results = Results(res, tmp_path / "run", {})
    en, zh = (exp.report(results, tmp_path, lang).html for lang in ("en", "zh"))
    assert "5158.07" in en and "5158.07" in zh and "sinks + window" in en and "汇点 + 窗口" in zh
    # with committed runs the full one leads and the others fold, numbers without figures
    both = render(results, "en", {"quick": results, "full": results})
    assert "the committed run" in both and both.count("<img") == 2 * en.count("<img")  # the main run and the own run
    assert res["seconds"] > 0 and res["cpu_seconds"] > 0 and len(res["load_avg"]["start"]) == 3
    sink = res["sink"]  # Gu et al.'s share of sink heads, and the largest head, per seed
    assert len(sink["sink_heads_frac_per_seed"]) == 2 and all(0 <= f <= 1 for f in sink["sink_heads_frac_per_seed"])
    for i, top in enumerate(sink["max_head_first_per_seed"]):  # no layer's mean over heads beats its largest head
        assert top >= max(layer[i] for layer in sink["first_per_seed"]) - 1e-9
    # --resume: the trained seeds and their evaluations come back from the checkpoints unchanged
    again = run_experiment("kv_eviction", out=tmp_path / "run", overrides={**exp.tiny, "data": str(own)}, seeds=2,
                           show_progress=False, resume=True)["results"]
    assert again["perplexity_last_bin"] == res["perplexity_last_bin"]
    assert [f["eval_s"] for f in again["train"]] == [f["eval_s"] for f in res["train"]]  # restored, not re-measured
