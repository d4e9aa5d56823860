"""Built-in backends, registered on import. Each is a plain ``run(call)`` with a ``supports(call)``
and an ``estimate(call)`` for cost-model dispatch (:mod:`attnkit.core.cost`)."""

from ..core import cost
from ..core.registry import register
from . import blockwise, linear, reference, sdpa

register("reference", reference.run, supports=reference.supports, estimate=cost.estimate_reference, priority=0)
register("sdpa", sdpa.run, supports=sdpa.supports, estimate=cost.estimate_sdpa, priority=10)
register("blockwise", blockwise.run, supports=blockwise.supports, estimate=cost.estimate_blockwise, priority=5)
# approximate (kernelized) attention: served only when asked for by name, never by auto
register("linear", linear.run, supports=linear.supports, exact=False, priority=-10)
register("linear_favor", linear.run_favor, supports=linear.supports, exact=False, priority=-10)
