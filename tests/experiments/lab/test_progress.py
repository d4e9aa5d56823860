"""The progress guard: the unigram entropy against a NumPy float64 computation, and the verdicts —
a loss well under the yardstick passes (even when it hardly moved after epoch 1), one near it is
flagged, nearly constant targets are exempt, a NaN history is flagged, and the run-level summary
and log line name the stalled models."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnkit.experiments.lab import progress as pg


def test_unigram_entropy_matches_numpy():
    rng = np.random.default_rng(0)
    seqs = [rng.integers(4, 30, rng.integers(1, 12)).tolist() for _ in range(200)]
    flat = np.concatenate([np.asarray(s) for s in seqs] + [np.full(len(seqs), 2)])  # EOS id 2 once per sequence
    _, counts = np.unique(flat, return_counts=True)
    p = counts / counts.sum()
    assert pg.unigram_entropy(seqs, eos=2) == pytest.approx(float(-(p * np.log(p)).sum()), rel=1e-12)
    assert pg.unigram_entropy([[5, 5, 5]]) == 0.0
    with pytest.raises(ValueError, match="at least one target token"):
        pg.unigram_entropy([[], []])


def _hist(*losses):
    return [{"epoch": i + 1, "val_loss": v} for i, v in enumerate(losses)]


def test_verdicts():
    ok = pg.check_progress(_hist(0.05, 0.049), baseline=3.0, vocab_size=28)  # converged in epoch 1: not a stall
    assert ok["ok"] and ok["first"] == 0.05 and ok["best"] == 0.049 and ok["uniform"] == pytest.approx(math.log(28))
    flat = pg.check_progress(_hist(6.2, 5.9, 5.8), baseline=6.5)
    assert not flat["ok"] and flat["ratio"] == pytest.approx(5.8 / 6.5) and "no better than predicting" in flat["reason"]
    edge = pg.check_progress(_hist(2.4), baseline=3.0)  # exactly 0.8 x: not above, so passes
    assert edge["ok"]
    const = pg.check_progress(_hist(0.5), baseline=0.01)
    assert const["ok"] and "nearly constant" in const["reason"]
    nan = pg.check_progress(_hist(float("nan")), baseline=2.0)
    assert not nan["ok"] and nan["best"] is None
    assert not pg.check_progress([], baseline=2.0)["ok"]
    with pytest.raises(ValueError, match="baseline must be a finite loss"):
        pg.check_progress(_hist(1.0), baseline=float("nan"))


def test_summary_and_warning():
    good = pg.check_progress(_hist(0.1), baseline=2.0)
    bad = pg.check_progress(_hist(1.9), baseline=2.0)
    s = pg.summarize({"rnn": [good, bad], "bahdanau": [good, good]})
    assert s["stalled"] == ["rnn"] and s["stall_fraction"] == pg.STALL_FRACTION and "unigram entropy" in s["rule"]
    line = pg.warning(s)
    assert line.startswith("WARNING: training made no meaningful progress for rnn (best val_loss 1.900")
    assert pg.warning(pg.summarize({"bahdanau": [good]})) is None
