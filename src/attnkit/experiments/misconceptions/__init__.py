"""Four misconceptions about attention, each measured: qkv (attention is not only self-attention),
explain (weights are not explanations), long (attention alone does not solve long inputs), heads
(more heads are not always better)."""

from .explain import MisconceptionExplain
from .heads import MisconceptionHeads
from .long import MisconceptionLong
from .qkv import MisconceptionQKV

__all__ = ["MisconceptionQKV", "MisconceptionExplain", "MisconceptionLong", "MisconceptionHeads"]
