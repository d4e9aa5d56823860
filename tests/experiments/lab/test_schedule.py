"""Warm-up + cosine learning-rate schedule: the multiplier against an independent NumPy formula, the
rates an optimizer actually gets, a resumed scheduler continuing the same curve, and bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnkit.experiments.lab.schedule import WarmupCosine, lr_schedule


def _oracle(total: int, warmup: int, floor: float, decay: str) -> np.ndarray:
    """The multipliers of every update, written independently with NumPy (float64)."""
    t = np.arange(total, dtype=np.float64)
    ramp = (t + 1) / max(warmup, 1)
    if decay == "constant":
        after = np.ones_like(t)
    else:
        p = np.clip((t - warmup) / max(1, total - warmup), 0.0, 1.0)
        after = floor + (1 - floor) * 0.5 * (1 + np.cos(np.pi * p))
    return np.where(t < warmup, ramp, after)


@pytest.mark.parametrize("total,warmup,floor,decay", [(100, 10, 0.05, "cosine"), (37, 0, 0.0, "cosine"), (50, 7, 0.1, "constant")])
def test_multiplier_matches_the_formula(total, warmup, floor, decay):
    m = WarmupCosine(total, warmup, decay, floor)
    got = np.array([m(t) for t in range(total)])
    np.testing.assert_allclose(got, _oracle(total, warmup, floor, decay), rtol=1e-12, atol=1e-15)
    if decay == "cosine":
        assert got[warmup] == pytest.approx(1.0) and got[-1] == pytest.approx(floor + (1 - floor) * 0.5 * (1 + np.cos(np.pi * (total - 1 - warmup) / (total - warmup))))
        assert m(10 * total) == pytest.approx(floor)  # past the end it stays at the floor


def test_optimizer_gets_the_scheduled_rates_and_a_resumed_scheduler_continues_the_curve():
    p = torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.SGD([p], lr=0.5)
    sched = lr_schedule(opt, total_steps=20, warmup_steps=4, decay="cosine", floor=0.1)
    seen = []
    for _ in range(12):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    np.testing.assert_allclose(seen, 0.5 * _oracle(20, 4, 0.1, "cosine")[:12], rtol=1e-12)
    state_opt, state_sched = opt.state_dict(), sched.state_dict()
    opt2 = torch.optim.SGD([torch.nn.Parameter(torch.zeros(3))], lr=0.5)
    sched2 = lr_schedule(opt2, total_steps=20, warmup_steps=4, decay="cosine", floor=0.1)
    opt2.load_state_dict(state_opt)
    sched2.load_state_dict(state_sched)
    rest = []
    for _ in range(8):
        rest.append(opt2.param_groups[0]["lr"])
        opt2.step()
        sched2.step()
    np.testing.assert_allclose(rest, 0.5 * _oracle(20, 4, 0.1, "cosine")[12:], rtol=1e-12)


def test_constant_without_warmup_is_no_scheduler():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    assert lr_schedule(opt, total_steps=10, warmup_steps=0, decay="constant") is None
    assert lr_schedule(opt, total_steps=10, warmup_steps=2, decay="constant") is not None


@pytest.mark.parametrize("kwargs,match", [
    ({"total_steps": 0}, "total_steps"), ({"total_steps": 10, "warmup_steps": -1}, "warmup_steps"),
    ({"total_steps": 10, "decay": "linear"}, "decay must be one of"), ({"total_steps": 10, "floor": 1.5}, "floor"),
    ({"total_steps": True}, "total_steps"),
])
def test_bad_arguments_name_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        WarmupCosine(**kwargs)
