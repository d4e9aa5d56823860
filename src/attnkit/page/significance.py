"""The one rule by which the page says a model "helped" or "hurt" against its baseline.

Two models, each trained over seeds: means m_a, m_b and seed standard deviations s_a, s_b. The
difference counts only when it exceeds two sigmas of the seed spread,

    |m_b − m_a| > 2 · σ,   σ = √(s_a² + s_b²)

(σ is the standard deviation of the difference of one seed of each; at 3 seeds per model, 2σ is
about 3.5 standard errors of the difference of the means, stricter than a two-sided Welch t-test at
95 %, which needs about 2.8 at these degrees of freedom: a learner should not be told "hurt" by a
drop that one more seed could undo). One seed has no spread, so nothing can be called.

The page states the rule where it uses it (:func:`rule_sentence`) and in its glossary (``2σ``).
"""

from __future__ import annotations

import math

SIGMAS = 2.0


def compare(delta: float, std_a: float, std_b: float, seeds: int) -> tuple[str, float]:
    """``(label, bar)``: ``delta`` (b − a, larger = better for b) against the 2σ bar of the two seed
    spreads. label: ``"helped"``, ``"hurt"``, ``"no clear difference"``, or ``"one seed"`` when
    ``seeds`` < 2 (the smaller seed count of the two)."""
    bar = SIGMAS * math.hypot(std_a, std_b)
    if seeds < 2:
        return "one seed", bar
    return ("helped" if delta > bar else "hurt" if delta < -bar else "no clear difference"), bar


def rule_sentence(lang: str) -> str:
    """The rule in one sentence, in ``lang``."""
    if lang == "zh":
        return ("判定规则：只有当差值超过 2σ（σ = √(s_a² + s_b²)，两个模型各自种子间标准差的合成）时，才说“有帮助”或“变差”；"
                "否则记为“没有明显差别”。")
    return ("The rule: a difference is called \"helped\" or \"hurt\" only when it exceeds 2σ, σ = √(s_a² + s_b²) from the two "
            "models' seed standard deviations; anything smaller is \"no clear difference\".")
