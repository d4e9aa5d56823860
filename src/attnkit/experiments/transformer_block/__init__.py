"""The Transformer block's pieces (residuals, layer norm, sinusoidal positions), each removed in turn."""

from .experiment import TransformerBlockAblation

__all__ = ["TransformerBlockAblation"]
