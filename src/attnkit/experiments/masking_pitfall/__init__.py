"""The -1e9 masking pitfall: what a large negative fill does in float16, bfloat16 and on fully masked rows."""

from .experiment import MaskingPitfall

__all__ = ["MaskingPitfall"]
