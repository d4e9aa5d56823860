"""Learning-rate schedules stepped after every optimizer update: linear warm-up, then constant or cosine.

A model trained for a fixed, small number of updates (the ``--quick`` runs) gains most from two
things a constant rate lacks:

* **warm-up** — the rate rises linearly over the first ``warmup_steps`` updates, so the first
  large, noisy gradients of a freshly initialised model (post-LN Transformers especially; Vaswani
  et al. 2017, https://arxiv.org/abs/1706.03762, §5.3) do not throw it into a bad region;
* **cosine decay** (Loshchilov & Hutter 2017, https://arxiv.org/abs/1608.03983, without restarts) —
  after warm-up the rate falls along half a cosine to ``floor`` × the peak at the last update, so
  the final epochs take small steps and settle in a minimum instead of bouncing around it at the
  peak rate (the loss spikes of a constant 3e-3 late in training).

The multiplier at update ``t`` (counted from 0), with W warm-up and N total updates::

    m(t) = (t + 1) / W                                              t < W
    m(t) = floor + (1 - floor) · ½ (1 + cos(π · min(1, (t - W) / (N - W))))   otherwise (cosine)
    m(t) = 1                                                        otherwise (constant)

:class:`WarmupCosine` is a callable object (not a lambda), so a ``LambdaLR`` built on it saves its
settings in the scheduler's ``state_dict`` and a resumed run continues the same curve.
"""

from __future__ import annotations

import math

import torch

DECAYS = ("constant", "cosine")


class WarmupCosine:
    """The multiplier ``m(step)`` of the module docstring; ``decay`` is ``"constant"`` or ``"cosine"``."""

    def __init__(self, total_steps: int, warmup_steps: int = 0, decay: str = "cosine", floor: float = 0.05):
        if isinstance(total_steps, bool) or not isinstance(total_steps, int) or total_steps < 1:
            raise ValueError(f"total_steps must be an int >= 1 (optimizer updates in the whole run), got {total_steps!r}")
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise ValueError(f"warmup_steps must be an int >= 0, got {warmup_steps!r}; use 0 for no warm-up")
        if decay not in DECAYS:
            raise ValueError(f"decay must be one of {list(DECAYS)}, got {decay!r}")
        if isinstance(floor, bool) or not isinstance(floor, (int, float)) or not 0.0 <= floor <= 1.0:
            raise ValueError(f"floor (the last update's fraction of the peak rate) must lie in [0, 1], got {floor!r}")
        self.total_steps, self.warmup_steps, self.decay, self.floor = total_steps, warmup_steps, decay, float(floor)

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        if self.decay == "constant":
            return 1.0
        progress = min(1.0, (step - self.warmup_steps) / max(1, self.total_steps - self.warmup_steps))
        return self.floor + (1.0 - self.floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def lr_schedule(optimizer: torch.optim.Optimizer, *, total_steps: int, warmup_steps: int = 0, decay: str = "constant",
                floor: float = 0.05) -> torch.optim.lr_scheduler.LambdaLR | None:
    """A per-update ``LambdaLR`` over :class:`WarmupCosine`, or None when it would be constant 1
    (no warm-up, constant decay): the caller then steps no scheduler at all."""
    m = WarmupCosine(total_steps, warmup_steps, decay, floor)
    if warmup_steps == 0 and decay == "constant":
        return None
    return torch.optim.lr_scheduler.LambdaLR(optimizer, m)
