"""The attention-versus-lag sentence says what the lag plot shows, in English and Chinese with the
same numbers: a 24-step rhythm whose troughs fall on lag 24 is a rhythm (and lag 24 does not stand
out), a bump at lag 24 stands out, and a flat profile has no rhythm."""

from __future__ import annotations

import re

import numpy as np

from attnkit.experiments.forecast.plots import lag_rhythm
from attnkit.experiments.forecast.section import lag_sentence


def _att(by_lag: np.ndarray, lags: dict[str, int]) -> dict:
    """The ``attention`` entry of a results setting, built from a profile as ``attention_by_lag`` does."""
    med = float(np.median(by_lag))
    return {"mean_weight_by_lag": by_lag.tolist(), "uniform_weight": 1 / 96,
            "lags_of_interest": {n: {"lag": L, "weight": float(by_lag[L - 1]), "ratio_to_median": float(by_lag[L - 1]) / med}
                                 for n, L in lags.items()},
            "top_lags": (np.argsort(by_lag)[::-1][:5] + 1).tolist()}


LAGS = np.arange(1, 192)
RHYTHM = 0.01 + 0.005 * np.cos(2 * np.pi * (LAGS - 8) / 24)  # peaks at lags 8, 32, 56, …; lag 24 in a trough
BUMP = 0.006 + 0.02 * np.exp(-0.5 * ((LAGS - 24) / 2.0) ** 2)  # one peak, at lag 24


def _numbers(s: str) -> list[str]:
    return sorted(re.findall(r"\d+\.\d+", s))


def test_rhythm_found_from_the_peaks():
    rh = lag_rhythm(RHYTHM, {"daily": 24})
    assert rh["period"] == 24 and rh["autocorr"] > 0.8
    assert rh["peak_lags"][:4] == [8, 32, 56, 80]
    nb = rh["neighbours"]["daily"]
    assert nb["weight"] == RHYTHM[23] and nb["max"] == RHYTHM[nb["max_lag"] - 1] and nb["max_lag"] == 32
    assert nb["position"] < 0.5  # lag 24 is below the middle of its neighbours' range


def test_rhythm_with_trough_at_24_is_stated_and_lag_24_does_not_stand_out():
    att = _att(RHYTHM, {"daily": 24})
    en, zh = lag_sentence(att, "en"), lag_sentence(att, "zh")
    assert "period of 24 steps" in en and "the daily period" in en
    assert "daily lag 24 itself does not stand out" in en
    assert "以 24 步为周期" in zh and "日周期" in zh and "日滞后 24 本身不突出" in zh
    assert _numbers(en) == _numbers(zh)
    assert f"{RHYTHM[23]:.4f}" in en and f"{RHYTHM[23]:.4f}" in zh


def test_bump_at_24_stands_out_and_no_rhythm_is_claimed():
    att = _att(BUMP, {"daily": 24})
    en, zh = lag_sentence(att, "en"), lag_sentence(att, "zh")
    assert "daily lag 24 itself stands out" in en and "日滞后 24 本身突出" in zh
    assert "no regular rhythm" in en and "没有规律的周期" in zh
    assert _numbers(en) == _numbers(zh)


def test_flat_noisy_profile_has_no_rhythm():
    rng = np.random.default_rng(0)
    flat = 0.0104 + 1e-5 * rng.standard_normal(191)
    att = _att(flat, {"daily": 24})
    en = lag_sentence(att, "en")
    assert "no regular rhythm" in en and "does not stand out" in en
