"""The closing roadmap: which experiments and course lessons to run next, with their commands."""

from .experiment import Roadmap

__all__ = ["Roadmap"]
