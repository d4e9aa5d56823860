"""Per-head attention diagnostics: the one place to import them from (``attnkit.inspect.metrics``).

Three files hold the code, each one concept:

- :mod:`attnkit.inspect.row_metrics` -- per-row metrics on dense (B, H, L, S) weights: normalised
  entropy, max weight, mean attention distance, sink mass, previous/next/self-token mass.
- :mod:`attnkit.inspect.row_summary` -- the same statistics computed tile by tile, O(L) memory,
  without the (L, S) matrix (:class:`RowSummaryAccumulator`).
- :mod:`attnkit.inspect.head_summary` -- per-head classification (dead / uniform / positional /
  content) with documented thresholds: :func:`classify_heads` -> :class:`HeadSummary`.

Attention weights are not explanations (Jain & Wallace 2019, https://arxiv.org/abs/1902.10186):
these numbers say where a head's softmax put its mass, nothing more. For importance, ablate
(:func:`attnkit.inspect.rollout.head_importance`).
"""

from attnkit.inspect.head_summary import (  # noqa: F401  (thresholds: importable, not in __all__)
    DEAD_MASS,
    HEAD_LABELS,
    POSITIONAL_MASS,
    UNIFORM_ENTROPY,
    HeadStats,
    HeadSummary,
    HeadThresholds,
    classify_heads,
)
from attnkit.inspect.row_metrics import (
    max_weight,
    mean_attention_distance,
    next_token_mass,
    normalized_entropy,
    previous_token_mass,
    self_mass,
    sink_mass,
)
from attnkit.inspect.row_summary import RowSummary, RowSummaryAccumulator, row_summaries_from_weights

__all__ = [
    "HEAD_LABELS",
    "normalized_entropy",
    "max_weight",
    "mean_attention_distance",
    "sink_mass",
    "previous_token_mass",
    "next_token_mass",
    "self_mass",
    "classify_heads",
    "HeadStats",
    "HeadSummary",
    "HeadThresholds",
    "RowSummary",
    "RowSummaryAccumulator",
    "row_summaries_from_weights",
]
