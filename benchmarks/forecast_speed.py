"""Forecaster speed: training time per batch and per 1k windows, inference time per 1k windows.

For every model of :mod:`attnkit.models.forecasters` at the forecast experiment's sizes (``--width``,
``--layers``) on random windows shaped like vic_elec's (``--input-len`` 336, ``--horizon`` 48, one
target plus 7 known covariates by default): the median over ``--repeats`` of one optimizer step
on a batch of ``--batch`` windows (forward, backward, Adam) and of a no-grad forward pass over 1,024
windows in batches of 512. It measures speed only; accuracy comes from the experiment.

Runs on one intra-op thread (the benchmark machine is shared: two spinning threads on busy cores
made small ops 10-70x slower, see PERF-NOTES). Run it with ``nice``:

    nice -n 10 python benchmarks/forecast_speed.py      # → benchmarks/results/forecast_speed.json

Shape legend: B batch, T_in input length, T_out horizon, C_in input channels, C_k known channels.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from attnkit.experiments.forecast.train import MODELS, QUICK, model_kwargs
from attnkit.models.forecasters import FORECASTERS, ForecastSpec, create_forecaster

from common import record

RESULTS = Path(__file__).resolve().parent / "results"


def _median_s(fn, repeats: int) -> float:
    fn()  # warm-up: first-call allocations and kernel choices
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench(name: str, spec: ForecastSpec, cfg: dict, batch: int, repeats: int) -> dict:
    torch.manual_seed(0)
    model = create_forecaster(name, spec, **model_kwargs(name, cfg))
    past = torch.randn(batch, spec.input_len, spec.in_channels)  # (B, T_in, C_in)
    known = torch.randn(batch, spec.horizon, spec.known_channels)  # (B, T_out, C_k)
    target = torch.randn(batch, spec.horizon, spec.out_channels)
    row = {"params": sum(p.numel() for p in model.parameters())}
    if FORECASTERS[name].trainable:
        opt = torch.optim.Adam(model.parameters(), 1e-3)

        def step():
            loss = torch.nn.functional.mse_loss(model(past, known), target)
            opt.zero_grad()
            loss.backward()
            opt.step()

        s = _median_s(step, repeats)
        row.update(train_ms_per_batch=1e3 * s, train_s_per_1k_windows=s * 1024 / batch)
    big_past, big_known = torch.randn(1024, spec.input_len, spec.in_channels), torch.randn(1024, spec.horizon, spec.known_channels)
    model.eval()

    @torch.no_grad()
    def infer():
        for i in range(0, 1024, 512):
            model(big_past[i : i + 512], big_known[i : i + 512])

    row["infer_s_per_1k_windows"] = _median_s(infer, repeats)
    return row


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input-len", type=int, default=336)
    p.add_argument("--horizon", type=int, default=48)
    p.add_argument("--channels", type=int, default=1, help="value channels (all forecast)")
    p.add_argument("--known", type=int, default=7, help="known covariates (also appended to the input)")
    p.add_argument("--width", type=int, default=QUICK["width"])
    p.add_argument("--layers", type=int, default=QUICK["layers"])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3, help="timed runs per number (the median is kept)")
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--out", type=Path, default=RESULTS / "forecast_speed.json")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    spec = ForecastSpec(a.input_len, a.horizon, a.channels + a.known, targets=tuple(range(a.channels)),
                        known_channels=a.known, period=min(48, a.input_len))
    cfg = {**QUICK, "width": a.width, "layers": a.layers}
    rows, load_before = {}, os.getloadavg()
    for name in a.models:
        rows[name] = bench(name, spec, cfg, a.batch, a.repeats)
        print(name, json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in rows[name].items()}), flush=True)
    doc = {"config": vars(a) | {"out": str(a.out)}, "threads": 1, "torch": torch.__version__,
           "platform": f"{platform.system()} {platform.machine()}",
           # wall-clock medians: on a shared machine they include time spent waiting for a core, so compare
           # models within one file (same load), not absolute numbers across files
           "loadavg_1min": {"before": round(load_before[0], 2), "after": round(os.getloadavg()[0], 2)}, "cpus": os.cpu_count(),
           "models": rows}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    record(a.out, doc)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
