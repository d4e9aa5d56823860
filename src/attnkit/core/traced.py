"""What attnkit runs only while ``torch.compile`` / ``torch.export`` trace an attention call.

Two things Dynamo cannot trace are handed to it explicitly here:

* :func:`constant` — ``fn(*args)`` evaluated once, in Python, while the graph is traced; its result
  is baked into the graph as a constant (``torch._dynamo.assume_constant_result``). Used for values
  read from context variables (options, the active captures) and for a mask's tile map, which
  describes the mask's structure, never q, k or v.
* :func:`notify_eagerly` — the attention observers (``attnkit.inspect.capture``) are Python code
  that records each call: it runs outside the graph (``torch.compiler.disable``), and under
  ``fullgraph=True`` / ``torch.export`` that is an error naming the reason.

Callers import this module inside their ``torch.compiler.is_compiling()`` branch, never at module
level: it imports ``torch._dynamo`` (with sympy, torch.onnx and ~880 other modules, ~1 s), which is
already loaded whenever something is being compiled, so ``import attnkit`` and eager calls never
pay for it. Dynamo executes such an import while tracing like any other (the module then sits in
``sys.modules``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import torch
import torch._dynamo

from . import hooks

if TYPE_CHECKING:
    from .call import AttentionCall
    from .output import AttentionOutput

T = TypeVar("T")


@torch._dynamo.assume_constant_result
def constant(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, computed once while tracing and a constant of the graph from then on.

    The arguments must be Python values or objects (Dynamo guards on the objects' identity); the
    result must be a constant Dynamo can bake in (ints, None, tuples of them)."""
    return fn(*args)


@torch.compiler.disable(
    reason="attnkit.inspect.capture (an attention observer) is active: it records each call in Python, outside "
    "the graph, so a fullgraph=True / torch.export trace cannot include it; compile without fullgraph, or capture an uncompiled run"
)
def notify_eagerly(call: AttentionCall, result: AttentionOutput) -> None:
    """Hand a traced call's result to the observers, in Python, outside the graph."""
    if hooks.has_observers():
        hooks.notify(call, result)
