"""The experiment layer: one folder per experiment (``seq2seq/``, ``vision/``, ``forecast/``,
``minilm/``, ``misconceptions/``, ``tiny/``), and ``lab/``, what they share: a registry, a runner,
and the training loop.

Shape legend (for experiments' docstrings): B batch, L query length, S key length, E embedding.

* :class:`Experiment` — base class stating an experiment's facts (presets, and for the report its
  title, question, how to read it, place, time, tiny size); ``@register`` adds one to the registry.
* :class:`RunContext` — what ``run(ctx)`` receives: config, seeds, out folder, device, rank, and
  ``ctx.fit`` (seeded, resumable, early-stopping, DDP-aware training loop returning a :class:`FitResult`).
* :func:`run_experiment` — the runner behind ``attnkit experiment NAME``; writes ``results.json``.

See ``docs/experiments.md`` for how to add one.
"""

from .lab.context import RunContext
from .lab.fit import FitResult
from .lab.registry import Experiment, experiments, get, names, register
from .lab.results import SCHEMA_VERSION, Results, Section, latest_results
from .lab.runner import SetupError, check_out, run_experiment

__all__ = [
    "Experiment", "RunContext", "FitResult", "register", "Section", "Results", "get", "names", "experiments",
    "run_experiment", "check_out", "SetupError", "SCHEMA_VERSION", "latest_results",
]
