"""The opening verdicts of the seq2seq section: each verdict from made-up numbers where the answer is
known, the sentence quoting the numbers it was given (en and zh alike), and on the committed runs
in results/seq2seq: every number printed comes from that run's results.json, the dates-list run
reads as the bottleneck and the Bible runs as attention's gain at every length."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnkit.experiments.lab.committed import committed_runs
from attnkit.experiments.seq2seq import overview as ov
from attnkit.page.names import run_name

RESULTS = Path(__file__).resolve().parents[3] / "results"


def _run(scores: dict[str, list[float]], metric: str = "exact_match", std: float = 0.5, seeds: int = 3) -> dict:
    """Results with one bucket per score (0–10, 11–20, ...), the same std everywhere."""
    def model(vals):
        ms = lambda v: {"mean": v, "std": std, "runs": [v] * seeds}  # noqa: E731
        return {"params": 1000, "buckets": [{"range": [10 * i + (i > 0), 10 * i + 10], "count": 20, "metrics": {metric: ms(v)}}
                                            for i, v in enumerate(vals)],
                "overall": {metric: ms(sum(vals) / len(vals))}}
    return {"metric_names": [metric], "length_unit": "words", "models": {n: model(v) for n, v in scores.items()}, "data": {"train": 5000}}


@pytest.mark.parametrize("scores,metric,kind", [
    ({"rnn": [90.0, 40.0, 5.0], "bahdanau": [99.0, 98.0, 97.0]}, "exact_match", "bottleneck"),
    ({"rnn": [12.0, 6.0, 5.0], "luong": [26.0, 19.0, 17.0]}, "bleu", "every_length"),
    ({"rnn": [98.0, 97.0, 96.0], "bahdanau": [100.0, 100.0, 99.0]}, "exact_match", "fits"),
    ({"rnn": [1.0, 0.5, 0.4], "bahdanau": [3.0, 2.0, 1.0]}, "bleu", "weak"),
    ({"rnn": [50.0, 49.0, 48.0], "bahdanau": [50.5, 49.0, 48.5]}, "exact_match", "unclear"),
])
def test_each_verdict_from_numbers_with_a_known_answer(scores, metric, kind):
    assert ov.verdict(_run(scores, metric))["kind"] == kind


def test_a_fall_within_the_seed_spread_is_not_called_a_bottleneck():
    r = _run({"rnn": [90.0, 80.0], "bahdanau": [99.0, 98.0]}, std=3.0)  # falls 10 vs 1: 9 points, spread 12
    assert ov.verdict(r)["kind"] != "bottleneck"


def test_sentences_quote_the_numbers_in_both_languages_and_explain_a_falling_transformer():
    r = _run({"rnn": [90.0, 40.0, 5.0], "bahdanau": [99.0, 98.0, 97.0], "transformer": [95.0, 60.0, 20.0]})
    en, zh = ov.sentence("toy", r, "en"), ov.sentence("toy", r, "zh")
    for text in (en, zh):
        for n in ("90.0", "5.0", "99.0", "97.0"):
            assert n in text
    assert en.startswith("toy shows the bottleneck") and "holds" in en and "瓶颈" in zh
    note_en, note_zh = ov.transformer_note("toy", r, "en"), ov.transformer_note("toy", r, "zh")
    assert "from 95.0 to 20.0" in note_en and "5,000 pairs" in note_en and "20.0" in note_zh
    steady = _run({"rnn": [90.0, 5.0], "bahdanau": [99.0, 97.0], "transformer": [99.0, 98.0]})
    assert ov.transformer_note("toy", steady) is None
    html = ov.overview_html({"toy": r}, "zh")
    assert "90.0 → 5.0 ± 0.5" in html and "<table>" in html and ov.overview_html({}, "en") == ""


def _fmt_ends(res: dict, metric: str) -> tuple[str, str]:
    full = [b for b in res["buckets"] if b["count"] > 0]
    return f"{full[0]['metrics'][metric]['mean']:.1f}", f"{full[-1]['metrics'][metric]['mean']:.1f}"


@pytest.mark.skipif(not (RESULTS / "seq2seq").is_dir(), reason="needs the committed results/ of a source checkout")
def test_committed_runs_numbers_come_from_their_json():
    runs = committed_runs("seq2seq", RESULTS)
    checked = 0
    for name, r in runs.items():
        v = ov.verdict(r)
        if v is None:
            continue
        metric = r["metric_names"][0]
        for lang in ("en", "zh"):
            text = ov.sentence(name, r, lang)
            for model in ("rnn", v["best"]):
                for n in _fmt_ends(r["models"][model], metric):
                    assert n in text, (name, lang, model, n)
            assert f"{v['seeds']}" in text
        checked += 1
    assert checked >= 3
    kinds = {n: ov.verdict(r)["kind"] for n, r in runs.items() if ov.verdict(r)}
    if "dates-list-full" in kinds:
        assert kinds["dates-list-full"] == "bottleneck"
    for bible in ("bible-hash-full", "bible-hash-30"):
        if bible in kinds:
            assert kinds[bible] == "every_length"


def test_the_takeaway_leads_with_the_bottleneck_and_quotes_every_group_in_both_languages():
    runs = {"bible-a": _run({"rnn": [12.0, 6.0, 5.0], "luong": [26.0, 19.0, 17.0]}, "bleu") | {"data": {"name": "bible"}},
            "dates-list-full": _run({"rnn": [90.0, 40.0, 5.0], "bahdanau": [99.0, 98.0, 97.0], "luong": [100.0, 99.0, 96.0]}),
            "copy-quick": _run({"rnn": [70.0, 10.0, 1.0], "bahdanau": [100.0, 99.0, 93.0]}, seeds=1),
            "fits": _run({"rnn": [98.0, 97.0, 96.0], "bahdanau": [100.0, 100.0, 99.0]})}
    assert ov.lead_run(runs) == "dates-list-full" and ov.lead_run({"fits": runs["fits"]}) == "fits" and ov.lead_run({}) is None
    en, zh = ov.takeaway(runs, "en"), ov.takeaway(runs, "zh")
    assert en.startswith("The run on date lists (long run) shows the bottleneck") and "from 90.0" in en and "to 5.0" in en
    assert "RNN + Bahdanau ends at 97.0 and RNN + Luong at 96.0" in en
    assert "The Bible runs (Bible En→Es, split by book, a) show attention's gain at every length" in en and "12.0 to 14.0 BLEU points" in en
    assert "(copy a string (quick run); 1 seed each)" in en and "at least 93.0 % exact match" in en and "falls to 1.0 %" in en and "fits" not in en
    for n in ("90.0", "5.0", "97.0", "96.0", "12.0", "14.0", "93.0", "1.0"):
        assert n in zh
    assert ov.takeaway({}, "en") == ""


@pytest.mark.skipif(not (RESULTS / "seq2seq").is_dir(), reason="needs the committed results/ of a source checkout")
def test_the_committed_takeaway_reads_its_numbers_from_the_json():
    runs = committed_runs("seq2seq", RESULTS)
    if "dates-list-full" not in runs:
        pytest.skip("no dates-list-full run committed")
    text = ov.takeaway(runs, "en")
    lead = runs["dates-list-full"]
    for model in ("rnn", "bahdanau", "luong"):
        assert _fmt_ends(lead["models"][model], "exact_match")[1] in text, model
    for name in ("bible-hash-30", "bible-hash-full", "copy-quick", "reverse-quick", "translit-quick"):
        assert run_name(name) in text or name not in runs  # every run named in words, never by its folder
