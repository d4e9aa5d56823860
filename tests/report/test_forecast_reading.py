"""The forecast section says first whether its attention chooses lags at all: the committed run the page once led
with spread its weight over lags between 0.006 and 0.016 around an even 0.0104, and the page never said so."""

from __future__ import annotations

import pytest

from attnkit.experiments.forecast.section import FLAT, flatness


def _att(weights: list[float]) -> dict:
    return {"mean_weight_by_lag": weights, "uniform_weight": 1 / len(weights)}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_nearly_uniform_attention_is_called_so(lang):
    flat = _att([0.0104 + 0.005 * ((i % 7) - 3) / 3 for i in range(96)])  # 0.0054..0.0154 around 1/96
    text = flatness(flat, lang)
    assert ("nearly uniform" in text) if lang == "en" else ("几乎是均匀的" in text)
    assert "0.0104" in text


def test_attention_that_picks_lags_is_said_to_choose():
    w = [0.5 / 94] * 94 + [0.25, 0.25]  # two lags with a quarter of the weight each
    text = flatness(_att(w), "en")
    assert text.startswith("The attention chooses") and f"{0.25 * 96:.1f}×" in text and 0.25 >= FLAT / 96
