"""The quick sizing rule: parameters follow the training target tokens within the floor and the cap,
epochs give about the target number of updates within their bounds, small data gets half batches,
large models a lower learning rate, and values the user set are kept."""

from __future__ import annotations

import math

import pytest

from attnkit.experiments.seq2seq import sizing as sz


def _pairs(n, tgt_len):
    return [([5] * 3, [6] * tgt_len) for _ in range(n)]


def test_params_epochs_and_batch_follow_the_data():
    small = sz.size_for(_pairs(500, 9))  # 5,000 target tokens (EOS included)
    assert small["target_tokens"] == 5000 and small["params"] == sz.MIN_PARAMS and small["batch_size"] == sz.BATCH // 2
    assert small["epochs"] == min(sz.MAX_EPOCHS, max(sz.MIN_EPOCHS, math.ceil(sz.TARGET_STEPS / math.ceil(500 / 32))))
    mid = sz.size_for(_pairs(5000, 39))  # 200,000 tokens: 0.5 per token = 100,000
    assert mid["params"] == 100_000 and mid["batch_size"] == sz.BATCH and mid["lr"] == sz.LR
    assert mid["epochs"] == math.ceil(sz.TARGET_STEPS / math.ceil(5000 / 64)) and mid["warmup_transformer"] == mid["steps"] // 10
    big = sz.size_for(_pairs(200_000, 49))
    assert big["params"] == sz.MAX_PARAMS and big["lr"] == sz.LR_LARGE and big["epochs"] == sz.MIN_EPOCHS
    assert "100,000 parameters" in sz.describe(mid) and f"{mid['epochs']} epochs" in sz.describe(mid)
    with pytest.raises(ValueError, match="training pairs"):
        sz.size_for([])


def test_apply_keeps_what_the_user_set():
    s = sz.size_for(_pairs(5000, 39))
    cfg = {"params": None, "epochs": 6, "lr": 0.5, "batch_size": 64, "patience": 3, "warmup_transformer": 0, "other": 1}
    out = sz.apply(cfg, s, {"lr"})
    assert out["lr"] == 0.5 and out["params"] == s["params"] and out["epochs"] == s["epochs"] and out["other"] == 1
    assert cfg["epochs"] == 6  # the input is not changed


def test_sized_runs_warm_up_decay_and_batch_by_length():
    s = sz.size_for(_pairs(5000, 39))
    assert s["schedule"] == "cosine" and s["batching"] == "length" and s["lr_floor"] == sz.LR_FLOOR
    assert s["warmup"] == max(1, int(sz.WARMUP_FRACTION * s["steps"])) and 0 < s["warmup"] < s["warmup_transformer"]
    text = sz.describe(s)
    assert f"warm-up {s['warmup']} updates" in text and "cosine" in text and "length-sorted" in text
    out = sz.apply({"schedule": "constant", "batching": "random"}, s, {"batching"})
    assert out["schedule"] == "cosine" and out["batching"] == "random"  # the user's batching is kept
