"""How multi-head attention splits and merges heads, why W_o exists, and the head-size rule of thumb."""

from .experiment import HeadSplit

__all__ = ["HeadSplit"]
