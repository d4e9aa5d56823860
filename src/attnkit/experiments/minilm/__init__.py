"""Self-attention on real text: the 72 heads of all-MiniLM-L6-v2, their labels, ablation importance
and the interactive viewer.

experiment: the experiment and its report section · viz: capture, plots and the viewer (``attnkit viz``).
"""

from .experiment import MiniLMMaps

__all__ = ["MiniLMMaps"]
