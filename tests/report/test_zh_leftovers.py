"""English the screenshots of the Chinese page showed inside Chinese prose: a model's name ("+MHSA (last stage)")
in the vision verdict, and the benchmark's model names ("4 layers") in the KV-cache step times."""

from __future__ import annotations

from attnkit.experiments.kv_cache.experiment import growth_sentence
from attnkit.experiments.vision.section import outcome_sentences


def _model(acc: float) -> dict:
    return {"acc": {"mean": acc, "std": 0.001, "per_seed": [acc] * 3}, "params": 1000, "flops": 10_000, "epochs": 2}


def test_the_vision_verdict_names_models_in_chinese():
    results = {"models": {"resnet": _model(0.90), "cbam": _model(0.88), "mhsa": _model(0.87)},
               "verdict": {n: {"label": "hurt", "delta_acc": d, "spread": 0.003} for n, d in (("cbam", -0.02), ("mhsa", -0.03))},
               "data": {"name": "fashion-mnist", "train": 100, "test": 50}}
    zh = " ".join(outcome_sentences(results, "zh"))
    assert "+CBAM、+MHSA（最后一个阶段） 则比普通网络差" in zh and "last stage" not in zh
    assert "+CBAM and +MHSA (last stage) did worse" in " ".join(outcome_sentences(results, "en"))


def test_the_kv_step_times_name_the_models_in_chinese():
    growth = [{"model": "1 layer", "first": 1.0, "last": 1.3, "tokens": 1024}, {"model": "4 layers", "first": 2.0, "last": 1.9, "tokens": 1024}]
    zh, en = growth_sentence(growth, "zh"), growth_sentence(growth, "en")
    assert "1 层：前八分之一 1.00 毫秒" in zh and "4 层：" in zh and "layer" not in zh
    assert "1 layer: 1.00 ms" in en and "4 layers: 2.00 ms" in en


def test_the_committed_decoding_table_names_the_models_in_chinese():
    from attnkit.experiments.kv_cache.experiment import _model_name

    assert _model_name("4_layer", "zh") == "4 层" and _model_name("1_layer", "zh") == "1 层"
    assert _model_name("4_layer", "en") == "4 layer" and _model_name("gpt2_like", "zh") == "gpt2 like"
