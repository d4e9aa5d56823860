"""Scoring functions side by side, and why the dot product is divided by sqrt(d)."""

from .experiment import Scoring

__all__ = ["Scoring"]
