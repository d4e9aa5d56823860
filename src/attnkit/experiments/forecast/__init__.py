"""Temporal attention in forecasting: attention over past time steps against simple baselines.

train: the experiment · plots: the figures · section: the report's prose (en, zh).
"""

from .train import ForecastExperiment

__all__ = ["ForecastExperiment"]
