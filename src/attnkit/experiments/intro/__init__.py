"""What attention computes: score, normalise, weighted sum, in NumPy beside :func:`attnkit.attention`."""

from .experiment import Intro

__all__ = ["Intro"]
