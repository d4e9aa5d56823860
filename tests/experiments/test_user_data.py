"""A user's own data at the quick size, through the command line as a user types it:

* ``seq2seq --data my.tsv --quick`` chooses each side's tokenization from the data (logged and in
  results.json), sizes the model to it (printed; a value given with --set is kept), and an attention
  model learns a small synthetic copy task; ``--set tokenizer=...`` overrides the choice;
* the progress guard: a run that cannot learn (learning rate 0) is flagged in the log, in
  results.json (with the unigram-entropy yardstick recomputed here from the split) and in the
  report section, which then shows a warning box and no reading;
* ``vision --data FOLDER`` trains on a folder of PNGs with one sub-folder per class, and a
  single-class folder is one clear error (exit code 2);
* ``forecast --data my.csv`` runs on a CSV with the user's own column names at a daily step.
"""

from __future__ import annotations

import re

import json
import math
from collections import Counter

import numpy as np
import pytest
import torch

from attnkit.data.parallel_tsv import load_tsv_pairs, split_tsv_pairs
from attnkit.data.synthetic_pairs import make_task_tsv
from attnkit.experiments.lab.command import main as cli_main


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _results(out) -> dict:
    return json.loads((out / "results.json").read_text(encoding="utf-8"))["results"]


def test_seq2seq_quick_on_a_user_tsv_chooses_tokens_sizes_and_learns(tmp_path, capsys):
    tsv = make_task_tsv("copy", tmp_path / "copy.tsv", 700, seed=0, min_len=3, max_len=8, vocab=8)
    out = tmp_path / "run"
    argv = ["seq2seq", "--data", str(tsv), "--quick", "--out", str(out), "--no-progress", "--models", "bahdanau",
            "--set", "epochs=12"]
    assert cli_main(argv) == 0
    captured = capsys.readouterr()
    log = captured.out + captured.err
    res = _results(out)
    tok = res["data"]["tokenization"]
    assert tok["source"]["kind"] == tok["target"]["kind"] == "word" and tok["target"]["word_types"] == 8
    assert tok["target"]["vocab_size"] == 4 + 8  # the specials and the 8 syllables
    assert "tokenizer target: word (12 ids)" in log and "quick sizing for" in log and "kept as set: epochs=12" in log
    sizing = res["sizing"]
    n_train = res["data"]["train"]
    assert sizing["pairs"] == n_train and sizing["batch_size"] == 32  # under 1,000 pairs: half batches
    assert sizing["kept_from_config"] == {"epochs": 12} and res["models"]["bahdanau"]["epochs"][0] <= 12  # early stop may end sooner
    assert abs(res["models"]["bahdanau"]["params"] / sizing["params"] - 1) <= 0.10
    assert res["metric_names"] == ["exact_match", "chrf"] and [b["range"] for b in res["models"]["bahdanau"]["buckets"]] == [[0, 10]]
    assert res["progress"]["stalled"] == [] and res["progress"]["models"]["bahdanau"][0]["ok"]
    assert res["models"]["bahdanau"]["overall"]["exact_match"]["mean"] >= 90.0  # copying 3-8 tokens is learned


def test_tokenizer_override_and_a_bad_value(tmp_path, capsys):
    tsv = make_task_tsv("translit", tmp_path / "t.tsv", 200, seed=0, min_len=3, max_len=6, vocab=6)
    out = tmp_path / "run"
    argv = ["seq2seq", "--data", str(tsv), "--out", str(out), "--no-progress", "--models", "rnn",
            "--set", "tokenizer=char", "--set", "epochs=1", "--set", "params=20000"]
    assert cli_main(argv) == 0
    tok = _results(out)["data"]["tokenization"]
    assert tok["source"]["kind"] == "char" and "forced" in tok["source"]["reason"]
    with pytest.raises(SystemExit) as e:
        cli_main(argv[:-6] + ["--set", "tokenizer=bpe"])
    assert e.value.code == 2 and "tokenizer= must be one of ['auto', 'char', 'word', 'subword'], got 'bpe'" in capsys.readouterr().err


def test_progress_guard_flags_a_run_that_cannot_learn(tmp_path, capsys):
    from attnkit.experiments.lab.registry import get

    tsv = make_task_tsv("reverse", tmp_path / "r.tsv", 300, seed=0, min_len=3, max_len=8, vocab=8)
    out = tmp_path / "run"
    argv = ["seq2seq", "--data", str(tsv), "--out", str(out), "--no-progress", "--models", "rnn",
            "--set", "lr=0", "--set", "epochs=2"]
    assert cli_main(argv) == 0
    log = capsys.readouterr().err
    res = _results(out)
    prog = res["progress"]
    assert prog["stalled"] == ["rnn"] and "WARNING: training made no meaningful progress for rnn" in log
    # the yardstick recomputed from the same split: entropy of the training targets' tokens plus one EOS each
    train = split_tsv_pairs(load_tsv_pairs(tsv))["train"]
    counts = Counter(w for _, t in train for w in t.split())
    counts["</s>"] = len(train)
    p = np.array(list(counts.values()), dtype=np.float64) / sum(counts.values())
    check = prog["models"]["rnn"][0]
    assert check["baseline"] == pytest.approx(float(-(p * np.log(p)).sum()), rel=1e-12)
    assert not check["ok"] and check["best"] > 0.8 * check["baseline"]
    assert check["uniform"] == pytest.approx(math.log(res["data"]["vocab"][1]))
    s = get("seq2seq").report(res, out)
    assert "class='notice'" in s.html and "Training made no meaningful progress" in s.html
    assert "Without attention" not in s.html and "not a result" in s.html  # no reading of models that failed
    s_zh = get("seq2seq").report(res, out, "zh")
    assert "训练没有取得有意义的进展" in s_zh.html


def _image_folder(root, n=12, size=16):
    from PIL import Image

    rng = np.random.default_rng(0)
    for cls, axis in (("horizontal", 0), ("vertical", 1)):
        (root / cls).mkdir(parents=True)
        for i in range(n):
            stripes = np.indices((size, size))[axis] % 4 < 2
            a = (stripes * 200 + rng.integers(0, 40, (size, size))).astype(np.uint8)
            Image.fromarray(a).save(root / cls / f"{i}.png")
    return root


def test_vision_on_an_image_folder_and_a_single_class_error(tmp_path, capsys):
    folder = _image_folder(tmp_path / "imgs")
    out = tmp_path / "run"
    argv = ["vision", "--data", str(folder), "--seeds", "1", "--out", str(out), "--no-progress", "--models", "resnet,vit",
            "--epochs", "1", "--set", "image_size=16"]
    assert cli_main(argv) == 0
    res = _results(out)
    assert res["data"]["name"] == "folder:imgs" and res["data"]["classes"] == ["horizontal", "vertical"]
    assert res["data"]["image_size"] == [16, 16] and res["data"]["train"] + res["data"]["test"] == 24
    assert all(0 <= m["acc"]["mean"] <= 1 for m in res["models"].values())
    single = tmp_path / "one"
    (single / "cat").mkdir(parents=True)
    (folder / "horizontal" / "0.png").rename(single / "cat" / "0.png")
    with pytest.raises(SystemExit) as e:
        cli_main(["vision", "--data", str(single), "--out", str(tmp_path / "bad"), "--no-progress"])
    assert e.value.code == 2 and "single class ('cat')" in capsys.readouterr().err


def test_forecast_on_a_user_csv_with_its_own_columns(tmp_path):
    import pandas as pd

    n = 500
    t = pd.date_range("2021-01-01", periods=n, freq="D")
    rng = np.random.default_rng(1)
    sales = 10 + np.sin(2 * np.pi * np.arange(n) / 7) + 0.1 * rng.normal(size=n)
    pd.DataFrame({"date": t.strftime("%Y-%m-%d"), "price": rng.normal(size=n), "sales": sales}).to_csv(tmp_path / "shop.csv", index=False)
    out = tmp_path / "run"
    argv = ["forecast", "--data", str(tmp_path / "shop.csv"), "--out", str(out), "--no-progress", "--seeds", "1",
            "--models", "naive", "dlinear", "--input-len", "28", "--horizon", "7", "--set", "epochs=1",
            "--set", "width=8", "--set", "max_train_windows=64"]
    assert cli_main(argv) == 0
    res = _results(out)
    text = json.dumps(res)
    assert "sales" in text and "naive" in text and "dlinear" in text


ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
QUICK_RUNS = ("copy-quick", "reverse-quick", "translit-quick")


def _longest_and_shortest(model: dict) -> tuple[float, float]:
    full = [b for b in model["buckets"] if b["count"]]
    return full[0]["metrics"]["exact_match"]["mean"], full[-1]["metrics"]["exact_match"]["mean"]


def test_committed_quick_runs_on_the_synthetic_tasks_and_their_report_section(tmp_path):
    """The committed ``--quick`` runs (results/seq2seq/*-quick): sized by the rule, tokenized as words
    (and characters for the transliteration target), no model flagged by the progress guard; the
    fixed-vector model falls with length to 0 % exact match on the longest bucket while an attention
    model stays high; the seq2seq report section reads them, headed as quick (not full) runs."""
    from attnkit.experiments.lab.committed import committed_runs
    from attnkit.experiments.seq2seq.section import section

    runs = {k: v for k, v in committed_runs("seq2seq", ROOT / "results").items() if k in QUICK_RUNS}
    assert sorted(runs) == sorted(QUICK_RUNS)
    for name, run in runs.items():
        r = run  # a dict of the run's results, with run_dir and meta
        assert run.meta["preset"] == "quick" and r["sizing"]["kept_from_config"] == {} and r["progress"]["stalled"] == []
        assert r["data"]["tokenization"]["target"]["kind"] == ("char" if name.startswith("translit") else "word")
        assert [b["range"] for b in r["models"]["rnn"]["buckets"]] == [[0, 10], [11, 20], [21, 30], [31, 40]]
        rnn_short, rnn_long = _longest_and_shortest(r["models"]["rnn"])
        assert rnn_short - rnn_long >= 30 and rnn_long == 0.0, name  # the bottleneck: nothing right beyond 10 tokens
        best_long = max(_longest_and_shortest(r["models"][m])[1] for m in ("bahdanau", "luong") if m in r["models"])
        assert best_long >= (90.0 if not name.startswith("translit") else 70.0), name
    s = section(runs["copy-quick"], runs["copy-quick"].run_dir, full_results=runs)
    # each committed run folds under its human name, labelled a quick run (never a full one)
    assert len(re.findall(r"Every table and figure of [^<]* \(quick run\)", s.html)) == 3 and "full run" not in s.html
    assert s.html.count("data:image/png;base64") >= 6 and "The bottleneck shows" in s.html
