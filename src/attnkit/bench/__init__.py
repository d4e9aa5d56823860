"""``attnkit bench``: the backend benchmark, in three parts that import one way only.

``suites`` (which configurations each suite measures, and which are skipped and why)
<- ``harness`` (a measurement in a fresh subprocess, the sweep, the JSON) -> ``plot`` (the PNG,
matplotlib only when asked). ``python -m attnkit.bench`` runs :func:`attnkit.bench.harness.main`.
"""

from .harness import auto_choices, main, run_bench, summarize
from .suites import BACKENDS, BIASES, MASKS, suite_specs

__all__ = ["BACKENDS", "BIASES", "MASKS", "auto_choices", "main", "run_bench", "suite_specs", "summarize"]
