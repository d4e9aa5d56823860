"""Channel and spatial attention in vision: SE, ECA, CBAM, self-attention over pixels and a ViT on
one small image classifier.

train: the experiment and its models · plots: the figures · section: the report's prose (en, zh) ·
cost: the cost of self-attention over pixels.
"""

from .train import VisionExperiment

__all__ = ["VisionExperiment"]
