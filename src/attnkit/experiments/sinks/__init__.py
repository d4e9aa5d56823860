"""Attention sinks measured on a pretrained encoder: where the weight goes, and what removing the sink costs."""

from .experiment import Sinks

__all__ = ["Sinks"]
