"""The blockwise backend's dropout seed while ``torch.compile`` traces a call.

The seed is drawn on the host (``int(...item())``), which a graph cannot contain: this wrapper runs
it in Python outside the graph (``torch.compiler.disable``), and under ``fullgraph=True`` that is an
error naming the reason below. Imported only inside the backend's ``torch.compiler.is_compiling()``
branch, because ``torch.compiler.disable`` loads ``torch._dynamo`` (already loaded while tracing,
~1 s and ~880 modules otherwise); see :mod:`attnkit.core.traced`.
"""

from __future__ import annotations

import torch

from .run import draw_seed

NO_FULLGRAPH_DROPOUT = (
    "blockwise dropout (dropout_p > 0) draws its per-call seed on the host, so it is unsupported under "
    "torch.compile(fullgraph=True); compile without fullgraph (the seed is drawn outside the graph), "
    "use dropout_p=0, or backend='sdpa'"
)


@torch.compiler.disable(reason=NO_FULLGRAPH_DROPOUT)
def dropout_seed() -> int:
    """:func:`attnkit.backends.blockwise.loop.run.draw_seed`, outside the traced graph."""
    return draw_seed()
