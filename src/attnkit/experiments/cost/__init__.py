"""Cost and speed: the dense score matrix's memory, linear attention's error, what ``auto`` chose,
and the backend benchmark."""

from .experiment import Cost

__all__ = ["Cost"]
