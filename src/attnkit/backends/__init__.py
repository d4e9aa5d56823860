"""Built-in backends, registered on import (``attnkit/__init__`` imports this package; the core
never does). Each backend module owns its ``run(call)``, ``supports(call)`` and cost
``estimate(call)``; the shared rates and the ranking are :mod:`attnkit.core.cost`."""

from ..core.registry import register
from . import blockwise, flex, linear, reference, sdpa

register("reference", reference.run, supports=reference.supports, estimate=reference.estimate, priority=0)
register("sdpa", sdpa.run, supports=sdpa.supports, estimate=sdpa.estimate, priority=10)
register("blockwise", blockwise.run, supports=blockwise.supports, estimate=blockwise.estimate, priority=5)
# compiled FlexAttention, where this torch has it and a CUDA device is present: auto weighs it on its
# measured estimate there (faster than SDPA's dense mask for sparse masks on CUDA; slower than blockwise
# on CPU, so on a CPU-only machine it stays opt-in, ``flex.enable()``, see flex.default_enabled)
if flex.default_enabled():
    flex.enable()
# approximate (kernelized) attention: served only when asked for by name, never by auto
register("linear", linear.run, supports=linear.supports, exact=False, priority=-10)
register("linear_favor", linear.run_favor, supports=linear.supports, exact=False, priority=-10)
