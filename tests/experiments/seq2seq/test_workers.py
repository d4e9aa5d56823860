"""Training split over processes: workers with ``only_seeds`` each train some seeds and score nothing,
then one ``--resume`` run over their checkpoints trains nothing and gives the same numbers as one
process that trained every seed; a bad ``only_seeds`` is a clear error before any work."""

from __future__ import annotations

import shutil

import pytest

from attnkit.experiments import SetupError, run_experiment
from attnkit.experiments.seq2seq import Seq2SeqExperiment

TINY = {**Seq2SeqExperiment.tiny, "layers": 1, "models": ["rnn", "bahdanau"]}


def test_workers_then_gather_equal_one_process(tmp_path):
    whole = run_experiment("seq2seq", out=tmp_path / "whole", seeds=2, overrides=TINY, show_progress=False)["results"]
    for seed in (0, 1):
        doc = run_experiment("seq2seq", out=tmp_path / f"w{seed}", seeds=2, overrides={**TINY, "only_seeds": [seed]}, show_progress=False)
        assert [(t["model"], t["seed"]) for t in doc["results"]["trained"]] == [("rnn", seed), ("bahdanau", seed)]
        assert "models" not in doc["results"]  # a worker scores nothing
        shutil.copytree(tmp_path / f"w{seed}" / "checkpoints", tmp_path / "gather" / "checkpoints", dirs_exist_ok=True)
    gathered = run_experiment("seq2seq", out=tmp_path / "gather", seeds=2, overrides=TINY, resume=True, show_progress=False)["results"]
    for name in TINY["models"]:
        assert gathered["models"][name]["overall"] == whole["models"][name]["overall"]
        assert gathered["models"][name]["buckets"] == whole["models"][name]["buckets"]


@pytest.mark.parametrize("only,match", [([5], "among the run's seeds"), ([], "non-empty JSON list"), ("1", "non-empty JSON list")])
def test_bad_only_seeds_is_a_clear_error(tmp_path, only, match):
    with pytest.raises(SetupError, match=match):
        run_experiment("seq2seq", out=tmp_path / "x", seeds=2, overrides={**TINY, "only_seeds": only}, show_progress=False)
