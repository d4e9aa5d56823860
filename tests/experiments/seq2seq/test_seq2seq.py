"""``attnkit experiment seq2seq`` at a tiny size: the results follow the schema (per model:
parameters within ±10 % of the budget, training time, per-bucket ranges, counts and metrics as mean
± std over seeds), the figures are written, a rerun with --resume trains nothing and reproduces the
metrics, TSV data gets BLEU/chrF, the report's reading is generated from the numbers (and says
"does not show" when the numbers do not, in English and Chinese with the same numbers, flags a run
where no model translates, and reads committed --full runs before its own), and bad inputs (unknown --data, --seeds 0, an empty or
tab-less TSV, a budget no model fits) get one clear error each before any training."""

from __future__ import annotations

import json
import re

import pytest

from attnkit.experiments import SetupError, run_experiment
from attnkit.experiments.lab.command import main as cli_main
from attnkit.experiments.seq2seq.models import match_budget
from attnkit.experiments.seq2seq import Seq2SeqExperiment
from attnkit.experiments.seq2seq.section import reading, section
from attnkit.page.names import run_name

TINY = {**Seq2SeqExperiment.tiny, "layers": 1}  # the report's tiny size, one layer; seeds as each test asks


@pytest.fixture(scope="module")
def dates_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("seq2seq_dates")
    doc = run_experiment("seq2seq", out=out, seeds=2, overrides=TINY, show_progress=False)
    return out, doc


def trained(results: dict) -> dict:
    """``results`` without the progress guard's verdict: one epoch at this size trains nothing, and
    the section then shows only the curves; these tests read the full section the numbers make."""
    return {k: v for k, v in results.items() if k != "progress"}


def test_results_schema_and_budget(dates_run):
    out, doc = dates_run
    assert json.loads((out / "results.json").read_text())["results"]["budget"] == TINY["params"]
    res = doc["results"]
    assert res["metric_names"] == ["exact_match", "char_accuracy"] and res["length_unit"] == "characters"
    assert set(res["models"]) == {"rnn", "bahdanau", "luong", "transformer"}
    for name, m in res["models"].items():
        assert abs(m["params"] / TINY["params"] - 1) <= 0.10, name
        assert len(m["train_time_s"]["runs"]) == 2 and m["train_time_s"]["mean"] > 0
        total = 0
        for b in m["buckets"]:
            lo, hi = b["range"]
            assert lo <= hi and b["count"] >= 0
            total += b["count"]
            for metric in ("exact_match", "char_accuracy"):
                s = b["metrics"][metric]
                assert set(s) == {"mean", "std", "runs"} and len(s["runs"]) == 2
        assert total == res["data"]["test"]
    assert {"rnn", "transformer"} <= set(res["examples"][0])
    al = res["alignments"]["bahdanau"][0]
    assert len(al["weights"]) == len(al["output"]) and len(al["weights"][0]) == len(al["source"])
    assert all(abs(sum(row) - 1) < 1e-3 for row in al["weights"])
    assert "rnn" not in res["alignments"]  # no attention, no alignment
    for name, m in res["models"].items():  # alignment peakedness for the recurrent attention models only
        focus = m["attention_focus"]
        assert (focus is None) == (name in ("rnn", "transformer")), name
        if focus:
            assert 0 <= focus["normalized_entropy"]["mean"] <= 1 and 0 < focus["max_weight"]["mean"] <= 1
    for png in ("metric_vs_length.png", "training_curves.png", "alignments_bahdanau.png", "alignments_luong.png", "alignments_transformer.png"):
        assert (out / png).stat().st_size > 10_000, png


def test_the_run_draws_each_figure_in_english_and_chinese(dates_run):
    """The Chinese report page shows the ``zh/`` copy, drawn by the run with a CJK font."""
    from attnkit.page.figures import cjk_font, zh_path

    if cjk_font() is None:
        pytest.skip("no CJK font on this machine (apt-get install fonts-noto-cjk)")
    out, _ = dates_run
    pngs = sorted(out.glob("*.png"))
    assert len(pngs) == 5
    for png in pngs:
        assert zh_path(png).is_file() and zh_path(png).read_bytes() != png.read_bytes(), png.name


def test_resume_trains_nothing_and_reproduces_metrics(dates_run):
    out, doc = dates_run
    again = run_experiment("seq2seq", out=out, seeds=2, overrides=TINY, resume=True, show_progress=False)
    for name, m in doc["results"]["models"].items():
        assert again["results"]["models"][name]["overall"] == m["overall"]
        assert again["results"]["models"][name]["history"] == m["history"]


class _Killed(Exception):
    pass


@pytest.mark.parametrize("model, extra", [("bahdanau", {}), ("transformer", {"batching": "length", "warmup_transformer": 5})])
def test_interrupted_training_resumes_to_the_uninterrupted_metrics(tmp_path, monkeypatch, model, extra):
    """A crash in epoch 2 (after epoch 1's checkpoint), then --resume: the same numbers as no crash
    (also with length-bucketed batches and the Transformer's per-step warm-up schedule)."""
    import attnkit.experiments.seq2seq.evaluate as ev

    cfg = {**TINY, "epochs": 2, "models": [model], "patience": 5, **extra}
    clean = run_experiment("seq2seq", out=tmp_path / "clean", overrides=cfg, show_progress=False)["results"]["models"][model]
    real, calls = ev.valid_loss, []

    def dies_in_epoch_two(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise _Killed("as a kill -9 would: after epoch 1 was checkpointed")
        return real(*a, **k)

    monkeypatch.setattr(ev, "valid_loss", dies_in_epoch_two)
    with pytest.raises(_Killed):
        run_experiment("seq2seq", out=tmp_path / "crash", overrides=cfg, show_progress=False)
    monkeypatch.setattr(ev, "valid_loss", real)
    resumed = run_experiment("seq2seq", out=tmp_path / "crash", overrides=cfg, resume=True, show_progress=False)["results"]["models"][model]
    assert [r["epoch"] for r in resumed["history"][0]] == [1, 2]
    for key in ("overall", "buckets"):
        assert resumed[key] == clean[key]
    assert [{k: v for k, v in r.items() if k != "time_s"} for r in resumed["history"][0]] == [{k: v for k, v in r.items() if k != "time_s"} for r in clean["history"][0]]


def test_report_section_is_generated_from_the_numbers(dates_run, tmp_path):
    out, doc = dates_run
    res = trained(doc["results"])
    s = section(res, out)
    assert "bottleneck" in s.html and "data:image/png;base64" in s.html
    rnn = res["models"]["rnn"]
    assert f"{rnn['params']:,}" in s.html
    first = next(b for b in rnn["buckets"] if b["count"])
    assert f"{first['metrics']['exact_match']['mean']:.1f}" in " ".join(reading(res))


def _fake(drops: dict[str, tuple[float, float]]) -> dict:
    def model(a, b, overall):
        bucket = lambda lo, hi, v: {"range": [lo, hi], "count": 10, "metrics": {"bleu": {"mean": v, "std": 1.0, "runs": [v - 1, v + 1]}, "chrf": {"mean": v, "std": 0.0, "runs": [v, v]}}}  # noqa: E731
        return {"params": 1000, "width": 8, "buckets": [bucket(0, 10, a), bucket(11, 20, (a + b) / 2), bucket(21, 1000, b)],
                "overall": {"bleu": {"mean": overall, "std": 0.5, "runs": [overall]}, "chrf": {"mean": overall, "std": 0.0, "runs": [overall]}}}

    return {"metric_names": ["bleu", "chrf"], "length_unit": "words",
            "models": {n: model(a, b, (a + b) / 2) for n, (a, b) in drops.items()}}


def test_reading_says_shows_and_does_not_show():
    shows = " ".join(reading(_fake({"rnn": (30.0, 8.0), "bahdanau": (31.0, 29.0), "luong": (30.0, 27.5), "transformer": (40.0, 38.0)})))
    assert "BLEU is 30.0 on the shortest sources (0–10 words) and 8.0 on the longest (over 20 words): a fall of 22.0 points" in shows
    assert "The bottleneck shows" in shows and "Transformer is ahead of" in shows
    flat = " ".join(reading(_fake({"rnn": (30.0, 27.0), "bahdanau": (31.0, 29.0), "transformer": (20.0, 18.0)})))
    assert "does not show clearly" in flat and "Transformer is behind" in flat
    assert "translates too little" not in flat and "Longer training" in flat
    collapsed = _fake({"rnn": (9.0, 4.0), "bahdanau": (18.0, 12.0), "luong": (10.0, 5.0)})
    collapsed["models"]["luong"]["attention_focus"] = {"max_weight": {"mean": 0.97}, "normalized_entropy": {"mean": 0.03}}
    collapsed["models"]["bahdanau"]["attention_focus"] = {"max_weight": {"mean": 0.35}, "normalized_entropy": {"mean": 0.62}}
    text = " ".join(reading(collapsed))
    assert "RNN + Luong's attention is nearly one-hot: on average 0.97 of each row's weight" in text and "Bahdanau's attention is" not in text
    en, zh = reading(collapsed), reading(collapsed, "zh")
    assert [re.findall(r"\d+\.\d+", a) for a in en] == [re.findall(r"\d+\.\d+", b) for b in zh]
    low = reading(_fake({"rnn": (9.0, 4.0), "bahdanau": (18.0, 12.0)}))
    assert "does not show clearly" in " ".join(low)
    assert "between 4.0 and 6.5 BLEU at every length: it translates too little" in low[-1]
    zh = reading(_fake({"rnn": (9.0, 4.0), "bahdanau": (18.0, 12.0)}), "zh")
    assert [re.findall(r"\d+\.\d", a) for a in low] == [re.findall(r"\d+\.\d", b) for b in zh]



def test_reading_in_chinese_carries_the_same_numbers_and_verdicts():
    fake = _fake({"rnn": (30.0, 8.0), "bahdanau": (31.0, 29.0), "luong": (30.0, 27.5), "transformer": (40.0, 38.0)})
    en, zh = reading(fake, "en"), reading(fake, "zh")
    assert len(en) == len(zh)
    for a, b in zip(en, zh):  # every number of each English paragraph is in its Chinese twin
        assert re.findall(r"\d+\.\d", a) == re.findall(r"\d+\.\d", b), (a, b)
    text = " ".join(zh)
    assert "瓶颈出现了" in text and "Transformer 领先" in text and "0–10 个词" in text and "超过 20 个词" in text
    flat = " ".join(reading(_fake({"rnn": (30.0, 27.0), "bahdanau": (31.0, 29.0), "transformer": (20.0, 18.0)}), "zh"))
    assert "瓶颈没有明显出现" in flat and "Transformer 落后" in flat


def test_committed_runs_are_read_first_then_the_quick_run_and_the_papers(dates_run, tmp_path):
    from attnkit.experiments import Results

    out, doc = dates_run
    fake = _fake({"rnn": (30.0, 8.0), "bahdanau": (31.0, 29.0), "transformer": (40.0, 38.0)}) | {"budget": 1000, "data": {"name": "bible"}}
    for m in fake["models"].values():
        m["train_time_s"] = {"mean": 60.0, "std": 1.0, "runs": [59.0, 60.0, 61.0]}
    committed = Results(fake, tmp_path / "bible-full", {"preset": "full", "seeds": [0, 1, 2], "time_s": 600, "finished": "now"})
    for lang, own in (("en", "This report’s own run"), ("zh", "本报告自己的运行")):
        html = section(trained(doc["results"]), out, lang, full_results={"bible-full": committed}).html
        at_full, at_quick = html.index(run_name("bible-full", lang)), html.index(own)  # the run named in words
        assert at_full < html.index("30.0") < at_quick  # the committed run's numbers come first
        # overview of the committed runs; committed: 2 metrics + sizes; quick: 2 metrics + sizes + examples; papers
        assert html.count("<table>") == 1 + 3 + 4 + 1
        heading = html.index("Every table and figure of " if lang == "en" else "全部表格与图：")
        name = run_name("bible-full", lang)
        assert html.index(f"{name} shows the bottleneck" if lang == "en" else f"{name} 显示了瓶颈") < heading < at_quick
        assert "26.75" in html and "17.82" in html and "19.00" in html and "14.00" in html
        main = re.sub(r"<details>.*?</details>", "", html, flags=re.S)  # the story's main flow: the rest is folded
        assert main.count("<table>") == 1 and main.count('class="sowhat"') == 1 and "Committed full run" not in main
        assert "{'" not in html  # the data set is a sentence, not a raw dict
    alone = section(doc["results"], out).html
    assert "This report’s own run" not in alone and "26.75" in alone
    main = re.sub(r"<details>.*?</details>", "", alone, flags=re.S)
    assert main.count("<table>") == 1 and main.count('class="sowhat"') == 1 and "26.75" not in main


def test_bad_data_and_seeds_are_clear_errors_before_work(tmp_path, capsys):
    with pytest.raises(SetupError, match="--data must be 'dates', 'dates-list', 'bible' or a path to a .tsv"):
        run_experiment("seq2seq", out=tmp_path / "a", overrides={"data": "wmt14"}, show_progress=False)
    with pytest.raises(SetupError, match="--seeds must be an integer >= 1"):
        run_experiment("seq2seq", out=tmp_path / "b", seeds=0, show_progress=False)
    with pytest.raises(SetupError, match="batching= must be 'random' or 'length', got 'sorted'"):
        run_experiment("seq2seq", out=tmp_path / "b2", overrides={"batching": "sorted"}, show_progress=False)
    with pytest.raises(SystemExit) as e:
        cli_main(["seq2seq", "--seeds", "0", "--out", str(tmp_path / "c")])
    assert e.value.code == 2 and "--seeds" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli_main(["seq2seq", "--data", "wmt14", "--out", str(tmp_path / "d"), "--no-progress"])
    assert e.value.code == 2 and "--data must be" in capsys.readouterr().err
    assert not (tmp_path / "d" / "checkpoints").exists()


def test_bad_tsv_files_are_clear_errors(tmp_path):
    empty = tmp_path / "empty.tsv"
    empty.write_text("")
    with pytest.raises(ValueError, match="holds no 'source<TAB>target' pairs"):
        run_experiment("seq2seq", out=tmp_path / "e", overrides={"data": str(empty)}, show_progress=False)
    notab = tmp_path / "notab.tsv"
    notab.write_text("a\tb\nno tab\n")
    with pytest.raises(ValueError, match=r"notab\.tsv:2: .*no tab"):
        run_experiment("seq2seq", out=tmp_path / "f", overrides={"data": str(notab)}, show_progress=False)
    with pytest.raises(FileNotFoundError, match="no such file"):
        run_experiment("seq2seq", out=tmp_path / "g", overrides={"data": str(tmp_path / "missing.tsv")}, show_progress=False)


def test_budget_no_model_fits_is_an_error():
    with pytest.raises(ValueError, match=r"within ±10 % of the budget"):
        match_budget(["rnn", "transformer"], 5000, 5000, {"params": 1000, "layers": 1})


def test_tsv_data_scored_with_bleu_and_chrf(tmp_path):
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()
    lines = [f"{' '.join(words[(i + k) % 10] for k in range(2 + i % 6))}\t{' '.join(reversed([words[(i + k) % 10] for k in range(2 + i % 6)]))}" for i in range(120)]
    tsv = tmp_path / "toy.tsv"
    tsv.write_text("\n".join(lines) + "\n")
    # a closed 10-word vocabulary would be read as whitespace tokens and scored by exact match: force BPE
    cfg = {**TINY, "data": str(tsv), "vocab_size": 40, "models": ["transformer"], "tokenizer": "subword"}
    res = run_experiment("seq2seq", out=tmp_path / "run", overrides=cfg, show_progress=False)["results"]
    assert res["metric_names"] == ["bleu", "chrf"] and res["length_unit"] == "words" and res["data"]["split"] == "hash"
    for m in res["models"].values():
        assert 0 <= m["overall"]["chrf"]["mean"] <= 100 and m["buckets"][0]["range"] == [0, 10]


def test_torchrun_two_processes_match_one_process(tmp_path):
    """The seq2seq models under DDP (world size 2, gloo): the same loss curve as one process."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cfg = {**TINY, "epochs": 2, "n_train": 64, "models": ["rnn", "transformer"]}
    run_experiment("seq2seq", out=tmp_path / "one", overrides=cfg, show_progress=False)  # one process, one thread (config)
    args = ["-m", "attnkit.cli", "experiment", "seq2seq", "--no-progress", "--models", "rnn", "transformer"]
    for k, v in cfg.items():
        if k != "models":
            args += ["--set", f"{k}={v}"]
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(port), *args,
                          "--out", str(tmp_path / "two")], env=env, capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, two.stderr[-3000:]
    a, b = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("one", "two"))
    assert b["env"]["world_size"] == 2
    for name in ("rnn", "transformer"):
        ha, hb = a["results"]["models"][name]["history"][0], b["results"]["models"][name]["history"][0]
        assert len(ha) == len(hb) == 2
        for ra, rb in zip(ha, hb):
            for k in ("train_loss", "val_loss"):
                assert rb[k] == pytest.approx(ra[k], rel=1e-3, abs=1e-5), (name, ra, rb)


def test_summary_row_quotes_the_committed_runs_when_there_are_any(dates_run, tmp_path):
    from attnkit.experiments import Results
    from attnkit.experiments.seq2seq.section import summary_row

    _, doc = dates_run
    own, _ = summary_row(doc["results"], "en")
    assert own.startswith("this report's run, exact match % on the longest sources: no attention ") and "dates-full" not in own
    committed = Results(_fake({"rnn": (30.0, 8.0), "bahdanau": (31.0, 29.0)}), tmp_path, {})
    measured, _ = summary_row(doc["results"], "zh", full_results={"bible-full": committed})
    assert measured == "圣经英译西，按卷划分（长时间运行），最长源序列上的BLEU：无注意力 8.0，Bahdanau 29.0"  # the lead run's longest sources


def test_a_run_where_no_model_translates_is_flagged_first():
    weak = reading(_fake({"rnn": (1.0, 0.2), "bahdanau": (1.2, 0.4), "transformer": (0.9, 0.1)}), "en")
    assert weak[0].startswith("Read this run with care: the best model reaches only 0.8 BLEU (under 5)")
    assert reading(_fake({"rnn": (1.0, 0.2), "transformer": (0.9, 0.1)}), "zh")[0].startswith("请谨慎解读这次运行")
    assert not reading(_fake({"rnn": (30.0, 8.0), "bahdanau": (31.0, 29.0)}))[0].startswith("Read this run with care")


def test_train_max_words_caps_training_and_validation_but_never_the_test_set(tmp_path):
    from attnkit.experiments.seq2seq.train import QUICK
    from attnkit.experiments.seq2seq.data import load_data

    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()
    lines = [" ".join(words[(i + k) % 10] for k in range(1 + i % 12)) + "\tx" for i in range(600)]
    tsv = tmp_path / "lengths.tsv"
    tsv.write_text("\n".join(lines) + "\n")
    cfg = {**QUICK, "data": str(tsv), "vocab_size": 40}
    whole, capped = load_data(cfg, tmp_path), load_data({**cfg, "train_max_words": 5}, tmp_path)
    src_words = lambda d, part: [len(d.src_tok.decode(s).split()) for s, _ in getattr(d, part)]  # noqa: E731
    for part in ("train", "valid"):
        assert max(src_words(whole, part)) > 5 and max(src_words(capped, part)) == 5
        assert sorted(src_words(capped, part)) == sorted(n for n in src_words(whole, part) if n <= 5)
    assert capped.test_pairs == whole.test_pairs and capped.info["train_max_words"] == 5
    with pytest.raises(SetupError, match="--train_max_words must be an integer >= 1, got 0"):
        run_experiment("seq2seq", out=tmp_path / "bad", overrides={"train_max_words": 0}, show_progress=False)


@pytest.mark.parametrize("pattern, entropy, peak", [("one-hot", 0.0, 1.0), ("uniform", 1.0, None)])
def test_attention_focus_tells_a_collapsed_alignment_from_a_spread_one(pattern, entropy, peak):
    import torch
    from types import SimpleNamespace

    from attnkit.experiments.seq2seq.evaluate import attention_focus

    pairs = [([5, 6, 7, 8], [5, 6, 7]), ([5, 6], [5, 6, 7, 8, 9])]  # source lengths 4 and 2: padding in the batch

    class Fake(torch.nn.Module):
        def forward(self, src, src_len, tgt_in):
            B, S, T = src.shape[0], src.shape[1], tgt_in.shape[1]
            valid = (torch.arange(S)[None] < src_len[:, None]).float()  # (B, S)
            w = torch.zeros(B, T, S)
            if pattern == "one-hot":
                w[..., 0] = 1.0
            else:
                w = (valid / valid.sum(-1, keepdim=True))[:, None].expand(B, T, S)
            return SimpleNamespace(alignments=w)

    f = attention_focus(Fake(), pairs, "cpu")
    assert f["normalized_entropy"] == pytest.approx(entropy, abs=1e-6)
    expected_peak = peak if peak is not None else (4 * 0.25 + 6 * 0.5) / 10  # one row per real output token: 3 + EOS and 5 + EOS
    assert f["max_weight"] == pytest.approx(expected_peak, abs=1e-6)
