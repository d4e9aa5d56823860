"""A seconds-long test bed: a one-layer attention model learns to reverse digit strings."""

from .experiment import Tiny

__all__ = ["Tiny"]
