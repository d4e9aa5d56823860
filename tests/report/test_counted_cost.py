"""Cost on the page is counted, not timed: the vision section's parameters and forward FLOPs
(torch.utils.flop_counter) and the forecast section's parameters come from the run's results, never the
wall-clock training times a machine shared with other jobs measured."""

from __future__ import annotations

import re

import pytest

from attnkit.experiments.vision.section import COST_COLUMNS, results_table


def _results(time_s: float) -> dict:
    def model(acc, params, flops):
        return {"acc": {"mean": acc, "std": 0.002, "per_seed": [acc] * 3}, "params": params, "flops": flops,
                "train_time_s": {"mean": time_s, "std": 1.0, "per_seed": [time_s] * 3},
                "images_per_s": {"mean": 4321.5, "std": 1.0, "per_seed": [4321.5] * 3}, "epochs": 2}
    return {"models": {"resnet": model(0.9, 77754, 18691840), "se": model(0.89, 80582, 18697216)}}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_cost_columns_are_parameters_and_flops(lang):
    a, b = results_table(_results(287.3), lang), results_table(_results(1056.6), lang)
    assert a == b  # the training time changes nothing on the page
    assert [c[0] for c in COST_COLUMNS] == ["params", "flops"]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", a)
    assert "77,754" in cells and "18.69" in cells and "80,582" in cells and "18.70" in cells
    assert "287.3" not in a and "4322" not in a and "4321" not in a
    assert "torch.utils.flop_counter" in a


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_forecast_weighs_attention_against_the_linear_model_by_parameters(lang):
    from attnkit.experiments.forecast.section import _linear_sentence

    def model(mse, params, train_s):
        return {"mse": {"mean": mse, "std": 0.01}, "seeds": 3, "params": {"mean": params}, "train_s": {"mean": train_s}}
    models = {"dlinear": model(0.30, 1234, 11.0), "transformer": model(0.31, 56789, 987.0)}
    text = _linear_sentence(models, lang)
    assert "56,789" in text and "1,234" in text
    assert "987" not in text and "11 s" not in text and "秒" not in text
