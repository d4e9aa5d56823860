"""Masks (padding, causal, sliding window) drawn, and the leak measured without them."""

from .experiment import Masks

__all__ = ["Masks"]
