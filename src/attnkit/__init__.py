"""attnkit: attention that is correct, fast and inspectable.

>>> import torch, attnkit
>>> q = k = v = torch.randn(2, 4, 16, 32)          # (B, H, L, E)
>>> res = attnkit.attention(q, k, v, mask=attnkit.masks.causal())
>>> res.out.shape, res.report.backend
(torch.Size([2, 4, 16, 32]), 'sdpa')
"""

from .core import biases, masks, scores
from .core.call import AttentionCall, attention
from .core.varlen import varlen_attention
from .core.dispatch import get_memory_budget, set_memory_budget
from .core.options import options
from .core.output import AttentionOutput, BackendResult, Report
from .core.registry import available as available_backends
from .core.registry import register
from . import backends as _backends  # noqa: F401  (registers the built-in backends; the core never imports them)
from .backends.blockwise import blockwise_attention, set_tile_sizes
from .backends.linear import linear_attention
from .modules.multihead import MultiHeadAttention
from .modules.latent_attention import MultiHeadLatentAttention
from .modules.rotary import RotaryEmbedding
from . import cache  # the KV caches under their short name (attnkit/cache.py re-exports attnkit.modules.cache)

# heavier parts load on first use: `attnkit.inspect.capture(...)` works after a plain `import attnkit`
_LAZY = ("inspect", "distributed", "models", "integrations")


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'attnkit' has no attribute {name!r}")

__all__ = [
    "attention",
    "AttentionCall",
    "AttentionOutput",
    "BackendResult",
    "Report",
    "MultiHeadAttention",
    "MultiHeadLatentAttention",
    "RotaryEmbedding",
    "available_backends",
    "biases",
    "blockwise_attention",
    "cache",
    "distributed",
    "inspect",
    "integrations",
    "linear_attention",
    "models",
    "options",
    "set_tile_sizes",
    "get_memory_budget",
    "masks",
    "register",
    "scores",
    "set_memory_budget",
    "varlen_attention",
]
__version__ = "0.1.0"
