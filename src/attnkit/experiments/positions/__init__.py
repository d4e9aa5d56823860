"""Attention alone cannot see word order; what relative positions (ALiBi, RoPE) add, measured."""

from .experiment import Positions

__all__ = ["Positions"]
