"""Built-in backends, registered on import (``attnkit/__init__`` imports this package; the core
never does). Each backend module owns its ``run(call)``, ``supports(call)`` and cost
``estimate(call)``; the shared rates and the ranking are :mod:`attnkit.core.cost`."""

from ..core.registry import register
from . import blockwise, flex, linear, reference, sdpa

register("reference", reference.run, supports=reference.supports, estimate=reference.estimate, priority=0)
register("sdpa", sdpa.run, supports=sdpa.supports, estimate=sdpa.estimate, priority=10)
register("blockwise", blockwise.run, supports=blockwise.supports, estimate=blockwise.estimate, priority=5)
# compiled FlexAttention is opt-in, ``attnkit.backends.flex.enable()``: it compiles per shape (a minute
# at n = 16k on CPU) and has no CPU backward, so it does not join the backends every call is offered to
# approximate (kernelized) attention: served only when asked for by name, never by auto
register("linear", linear.run, supports=linear.supports, exact=False, priority=-10)
register("linear_favor", linear.run_favor, supports=linear.supports, exact=False, priority=-10)
