"""Forecasters sharing one interface, and a factory by name.

``create_forecaster("lstm_attention", spec, hidden=32)`` builds any of :data:`FORECASTERS`; every
model maps ``past (B, T_in, C_in)`` and ``future_known (B, T_out, C_k) | None`` to
``(B, T_out, C_out)`` (see :mod:`.base`). The baselines (``naive``, ``seasonal_naive``,
``dlinear``) are the yardsticks every forecasting paper is measured against.
"""

from __future__ import annotations

from .base import Forecaster, ForecastSpec, InstanceNorm
from .linear import DLinearForecaster
from .lstm import LSTMForecaster
from .lstm_attention import LSTMAttentionForecaster
from .naive import NaiveForecaster
from .patch_transformer import PatchTransformerForecaster
from .seasonal_naive import SeasonalNaiveForecaster
from .transformer import TransformerForecaster

FORECASTERS: dict[str, type[Forecaster]] = {
    cls.name: cls
    for cls in (
        NaiveForecaster, SeasonalNaiveForecaster, DLinearForecaster, LSTMForecaster,
        LSTMAttentionForecaster, TransformerForecaster, PatchTransformerForecaster,
    )
}


def create_forecaster(name: str, spec: ForecastSpec, **kwargs) -> Forecaster:
    """Build the forecaster called ``name`` for ``spec``; ``kwargs`` go to its constructor."""
    if not isinstance(name, str) or name not in FORECASTERS:
        raise ValueError(f"unknown forecaster {name!r}; choose one of {sorted(FORECASTERS)}")
    return FORECASTERS[name](spec, **kwargs)


__all__ = [
    "FORECASTERS", "Forecaster", "ForecastSpec", "InstanceNorm", "create_forecaster",
    "DLinearForecaster", "LSTMForecaster", "LSTMAttentionForecaster", "NaiveForecaster",
    "PatchTransformerForecaster", "SeasonalNaiveForecaster", "TransformerForecaster",
]
