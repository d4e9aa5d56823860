"""The vision section's cost is counted, not timed: parameters and forward FLOPs (torch.utils.flop_counter)
from the run's results, never the wall-clock training times a shared machine measured."""

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
