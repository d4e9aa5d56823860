"""The experiment layer: a registry of experiments, a runner, and the training loop they share.

Shape legend (for experiments' docstrings): B batch, L query length, S key length, E embedding.

* :class:`Experiment` — base class; ``@register`` adds one to the registry under its ``name``.
* :class:`RunContext` — what ``run(ctx)`` receives: config, seeds, out folder, device, rank, and
  ``ctx.fit`` (seeded, resumable, early-stopping, DDP-aware training loop returning a :class:`FitResult`).
* :func:`run_experiment` — the runner behind ``attnkit experiment NAME``; writes ``results.json``.

See ``docs/experiments.md`` for how to add one.
"""

from .context import RunContext
from .fit import FitResult
from .registry import Experiment, Results, Section, experiments, get, names, register
from .runner import SCHEMA_VERSION, SetupError, check_out, run_experiment

__all__ = [
    "Experiment", "RunContext", "FitResult", "register", "Section", "Results", "get", "names", "experiments",
    "run_experiment", "check_out", "SetupError", "SCHEMA_VERSION",
]
