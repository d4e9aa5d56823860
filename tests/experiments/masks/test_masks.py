"""The ``masks`` experiment: a tiny run finds the causal and padding leaks large without a mask and
zero with it, its sliding-window shares match the closed-form count, its figure is drawn in both
languages, and the page quotes the measured numbers."""

from __future__ import annotations

import numpy as np
import pytest

from attnkit.experiments import Results, get, run_experiment
from attnkit.page.figures import cjk_font, zh_path

EPS32 = float(np.finfo(np.float32).eps)


def window_share(n: int, window: int) -> float:
    """Share of the n × n (query, key) pairs a causal window of ``window`` keys keeps: query i sees min(i + 1, window) keys."""
    return float(np.minimum(np.arange(1, n + 1), window).sum()) / n**2


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("masks")
    exp = get("masks")
    doc = run_experiment("masks", out=out, overrides={**exp.tiny, "window": 8, "window_lengths": [4, 16, 64]}, show_progress=False)
    return exp, doc["results"], out


def test_leaks_are_large_without_the_mask_and_zero_with_it(run):
    _, res, _ = run
    c, p = res["causal"], res["padding"]
    assert c["without"] > 0.05 and p["without"] > 0.05  # the hidden tokens were moved by O(1): the outputs follow
    # a masked key gets weight exactly 0, so its content cannot reach the output: at most float32 rounding
    assert c["with"] <= 8 * EPS32 and p["with"] <= 8 * EPS32
    real, L = p["real"], res["L"]
    assert real == L // 3 and 0.3 < p["mass_on_padding"] < 1  # random scores: roughly the padding's share of the keys


def test_window_shares_match_the_closed_form(run):
    _, res, _ = run
    assert {int(n): s for n, s in res["window_share"].items()} == pytest.approx({n: window_share(n, 8) for n in (4, 16, 64)}, abs=1e-7)


def test_the_figure_and_both_languages(run):
    exp, res, out = run
    assert (out / "masks.png").is_file() and zh_path(out / "masks.png").is_file() == (cjk_font() is not None)
    results = Results(res, out, {})
    en, zh = (exp.report(results, out, lang).html for lang in ("en", "zh"))
    c = res["causal"]
    assert f"up to {c['without']:.3f} without a mask" in en and f"最多变化 {c['without']:.3f}" in zh
    assert "window 8" in en and "窗口 8" in zh
    assert exp.summary(res, "zh")[0].startswith("无/有因果掩码时的泄漏")
