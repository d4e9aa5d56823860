"""attnkit: attention that is correct, fast and inspectable.

>>> import torch, attnkit
>>> q = k = v = torch.randn(2, 4, 16, 32)          # (B, H, L, E)
>>> res = attnkit.attention(q, k, v, mask=attnkit.masks.causal())
>>> res.out.shape, res.report.backend
(torch.Size([2, 4, 16, 32]), 'sdpa')
"""

from .core import biases, masks, scores
from .core.call import AttentionCall, attention
from .core.dispatch import get_memory_budget, set_memory_budget
from .core.output import AttentionOutput, BackendResult, Report
from .core.registry import available as available_backends
from .core.registry import register
from .modules.multihead import MultiHeadAttention

__all__ = [
    "attention",
    "AttentionCall",
    "AttentionOutput",
    "BackendResult",
    "Report",
    "MultiHeadAttention",
    "available_backends",
    "biases",
    "get_memory_budget",
    "masks",
    "register",
    "scores",
    "set_memory_budget",
]
__version__ = "0.1.0"
