"""attnkit.inspect: look at attention weights -- diagnostics, rollout, plots, HTML viewer.

Attention weights show where a head's softmax put its mass; they are not explanations
(see :mod:`attnkit.inspect.metrics`). matplotlib (``pip install attnkit[viz]``) is only
imported when a plot is drawn.
"""

from attnkit.inspect.capture import CapturedCall, Recorder, capture, tiled_row_summaries
from attnkit.inspect.metrics import (
    HEAD_LABELS,
    HeadStats,
    HeadSummary,
    HeadThresholds,
    RowSummary,
    RowSummaryAccumulator,
    classify_heads,
    max_weight,
    mean_attention_distance,
    next_token_mass,
    normalized_entropy,
    previous_token_mass,
    row_summaries_from_weights,
    self_mass,
    sink_mass,
)
from attnkit.inspect.plots import plot_diagnostics, plot_head, plot_heads_grid, plot_patch_map
from attnkit.inspect.rollout import attention_rollout, head_importance
from attnkit.inspect.viewer import render_html, save_html

__all__ = [
    "CapturedCall",
    "Recorder",
    "capture",
    "tiled_row_summaries",
    "HEAD_LABELS",
    "HeadStats",
    "HeadSummary",
    "HeadThresholds",
    "RowSummary",
    "RowSummaryAccumulator",
    "attention_rollout",
    "classify_heads",
    "head_importance",
    "max_weight",
    "mean_attention_distance",
    "next_token_mass",
    "normalized_entropy",
    "plot_diagnostics",
    "plot_head",
    "plot_heads_grid",
    "plot_patch_map",
    "previous_token_mass",
    "render_html",
    "row_summaries_from_weights",
    "save_html",
    "self_mass",
    "sink_mass",
]
