"""``RunContext``: what an experiment's ``run(ctx)`` gets — its configuration, seeds, output folder,
device and rank — and the helpers every experiment needs (progress bars, logging, atomic JSON and
PNG writes, seeding, and the shared training loop ``ctx.fit``).

Only rank 0 writes files and shows progress; on the other ranks of a torchrun job ``save_json`` and
``save_figure`` do nothing (the figure is still closed) and ``log`` is silent.
"""

from __future__ import annotations

import math
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import torch

from .atomic import save_json as _save_json
from .atomic import write_atomic
from .fit import FitResult, fit

MIN_FIGURE_PX = 1000  # figures are saved at least this wide, so text stays readable when zoomed


class _NoBar:
    """The progress bar of ranks other than 0 (and of disabled bars): accepts every call, shows nothing."""

    def __init__(self, iterable=None):
        self._it = iterable

    def __iter__(self):
        return iter(self._it if self._it is not None else ())

    def update(self, n=1):
        pass

    def set_postfix_str(self, s=""):
        pass

    def set_postfix(self, *a, **k):
        pass

    def set_description(self, *a, **k):
        pass

    def close(self):
        pass


@dataclass
class RunContext:
    """One run of one experiment. ``config`` is the preset (``quick`` or ``full``) merged with the
    command-line flags; ``seeds`` the seeds to run (``--seeds N`` gives ``[0, …, N-1]``); ``out``
    the run's folder (it exists and is writable)."""

    name: str
    config: dict
    seeds: list[int]
    out: Path
    resume: bool = False
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    rank: int = 0
    world_size: int = 1
    preset: str = "quick"
    show_progress: bool = True
    current_seed: int = 0
    #: training seconds restored from checkpoints that earlier (killed) processes wrote: a resumed
    #: run's ``time_s`` adds them, so it states what the whole run cost, not only its last process
    restored_s: float = 0.0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # -- output ---------------------------------------------------------------------------------
    def log(self, msg: str) -> None:
        """A line on stderr prefixed with the experiment's name (rank 0 only)."""
        if self.is_main:
            print(f"[{self.name}] {msg}", file=sys.stderr, flush=True)

    def progress(self, iterable: Iterable | None = None, total: int | None = None, desc: str = ""):
        """A progress bar with ETA on stderr around ``iterable`` (rank 0 only; elsewhere a silent pass-through)."""
        if not (self.is_main and self.show_progress):
            return _NoBar(iterable)
        from tqdm.auto import tqdm

        return tqdm(iterable, total=total, desc=desc, file=sys.stderr, dynamic_ncols=True,
                    mininterval=0.5 if sys.stderr.isatty() else 5.0)

    def _bar(self, total: int, initial: int = 0, desc: str = ""):
        if not (self.is_main and self.show_progress):
            return _NoBar()
        from tqdm.auto import tqdm

        return tqdm(total=total, initial=initial, desc=desc, file=sys.stderr, dynamic_ncols=True,
                    mininterval=0.5 if sys.stderr.isatty() else 5.0)

    def path(self, *parts: str) -> Path:
        """``out/parts...``, its parent folder created."""
        p = self.out.joinpath(*parts)
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def save_json(self, relpath: str, obj: Any) -> Path:
        """Write ``obj`` as JSON to ``out/relpath`` atomically (rank 0 only); numpy/torch values converted."""
        p = self.out / relpath
        if self.is_main:
            _save_json(p, obj)
        return p

    def save_figure(self, fig, relpath: str) -> Path:
        """Save a matplotlib figure as PNG at ``out/relpath`` (at least 1,000 px wide), atomically,
        and close it (on every rank)."""
        import matplotlib.pyplot as plt

        p = self.out / relpath
        if p.suffix.lower() != ".png":
            raise ValueError(f"save_figure: relpath must end in .png, got {relpath!r}; e.g. 'loss.png'")
        try:
            if self.is_main:
                # the width that counts is the tight box savefig crops to (plus its 0.1 in padding)
                width_in = fig.get_tightbbox(fig.canvas.get_renderer()).width + 0.2
                dpi = max(100, math.ceil((MIN_FIGURE_PX + 2) / width_in))
                write_atomic(p, lambda f: fig.savefig(f, format="png", dpi=dpi, bbox_inches="tight"))
        finally:
            plt.close(fig)
        return p

    # -- seeding and training -------------------------------------------------------------------
    def seed_everything(self, seed: int) -> None:
        """Seed Python, NumPy and torch (every device) with ``seed``; ``fit`` then shuffles from it too."""
        import numpy as np

        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise ValueError(f"seed_everything: seed must be an int >= 0, got {seed!r}")
        random.seed(seed)
        np.random.seed(seed % 2**32)
        torch.manual_seed(seed)  # also seeds every CUDA device
        self.current_seed = seed

    def fit(self, model, train_data=None, **kwargs) -> FitResult:
        """Train ``model``; see :func:`attnkit.experiments.lab.fit.fit` for the arguments."""
        return fit(self, model, train_data, **kwargs)
