"""Built-in backends, registered on import. Each is a plain ``run(call)`` with a ``supports(call)``."""

from ..core.registry import register
from . import reference, sdpa

register("reference", reference.run, supports=reference.supports, priority=0)
register("sdpa", sdpa.run, supports=sdpa.supports, priority=10)
