"""The runner: one call runs one experiment and writes ``out/results.json``.

:func:`run_experiment` merges the preset (``quick`` or ``full``) with overrides, checks the output
folder **before any work** (a file path, a path under a file, or a read-only folder fails at once
with the reason), joins the torchrun process group when there is one, calls ``experiment.run(ctx)``
and writes, on rank 0 and atomically::

    {"schema_version": 1, "experiment": ..., "preset": "quick", "config": {...}, "seeds": [0],
     "started": ISO time, "finished": ISO time, "time_s": ..., "env": {"torch", "python",
     "threads", "platform", "device", "world_size", "attnkit"}, "results": <what run returned>}
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import time
from pathlib import Path

import torch

from . import ddp
from .atomic import save_json, to_jsonable
from .context import RunContext
from .registry import Experiment, SetupError, get
from .results import RESULTS_FILE, SCHEMA_VERSION
DEFAULT_ROOT = Path("runs")  # default --out is runs/NAME/PRESET, where `attnkit report` looks


def default_out(name: str, preset: str) -> Path:
    return DEFAULT_ROOT / name / preset


def check_out(out: str | Path) -> Path:
    """Create ``out`` if needed and prove it writable, or raise :class:`SetupError` saying why."""
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise SetupError(f"--out {str(p)!r} is an existing file, not a folder; give a folder path (it is created when missing)")
    for parent in p.parents:  # the nearest existing ancestor must be a folder
        if parent.exists():
            if not parent.is_dir():
                raise SetupError(f"--out {str(p)!r} lies under {str(parent)!r}, which is a file, so no folder can be created there; "
                                 "give a folder path")
            break
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SetupError(f"--out {str(p)!r} cannot be created ({e.strerror or e}); give a folder you can write to") from e
    probe = p / f".attnkit-write-test-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise SetupError(f"--out {str(p)!r} is not writable ({e.strerror or e}); give a folder you can write to") from e
    return p


def resolve_device(device: str | torch.device | None) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise SetupError(f"--device must be 'cpu' or 'cuda', got {device!r}") from e
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SetupError("--device cuda: torch sees no CUDA device here (torch.cuda.is_available() is False); use --device cpu")
    if dev.type not in ("cpu", "cuda"):
        raise SetupError(f"--device must be 'cpu' or 'cuda', got {device!r}")
    return dev


def make_config(exp: Experiment, preset: str, overrides: dict | None = None) -> dict:
    """The preset's configuration with ``overrides`` on top (keys the preset lacks are allowed:
    they are the experiment's own flags)."""
    if preset not in ("quick", "full"):
        raise SetupError(f"preset must be 'quick' or 'full', got {preset!r}")
    config = dict(getattr(exp, preset))
    config.update(overrides or {})
    return config


def run_experiment(
    experiment: str | Experiment,
    *,
    preset: str = "quick",
    seeds: int | None = None,
    out: str | Path | None = None,
    resume: bool = False,
    device: str | torch.device | None = None,
    overrides: dict | None = None,
    show_progress: bool = True,
) -> dict:
    """Run one experiment; returns the document written to ``out/results.json``.

    ``seeds`` is a count (``N`` runs seeds ``0..N-1``; default: the config's ``"seeds"`` or the
    experiment's ``seeds``). ``out`` defaults to ``runs/NAME/PRESET``. ``device`` defaults to CUDA
    when present. Under torchrun every rank calls this; only rank 0 writes.
    """
    exp = get(experiment) if isinstance(experiment, str) else experiment
    if not isinstance(exp, Experiment):
        raise TypeError(f"run_experiment: expected an experiment name or Experiment, got {type(experiment).__name__}")
    config = make_config(exp, preset, overrides)
    n_seeds = config.get("seeds", exp.seeds) if seeds is None else seeds
    if not isinstance(n_seeds, int) or isinstance(n_seeds, bool) or n_seeds < 1:
        raise SetupError(f"--seeds must be an integer >= 1 (how many seeds to run), got {n_seeds!r}")
    dev = resolve_device(device)
    out_dir = check_out(default_out(exp.name, preset) if out is None else out)

    world, dev = ddp.init_from_env(dev)
    try:
        torch.backends.cudnn.benchmark = False  # autotuning picks kernels by timing: not reproducible
        torch.backends.cudnn.deterministic = True
        ctx = RunContext(name=exp.name, config=config, seeds=list(range(n_seeds)), out=out_dir, resume=resume,
                         device=dev, rank=world.rank, world_size=world.world_size, preset=preset,
                         show_progress=show_progress)
        ctx.seed_everything(0)
        started, t0 = _now(), time.perf_counter()
        ctx.log(f"{preset} run into {out_dir} on {dev}" + (f", {world.world_size} processes" if world.world_size > 1 else ""))
        results = exp.run(ctx)
        if not isinstance(results, dict):
            raise TypeError(f"experiment {exp.name!r}: run(ctx) must return a dict of results, got {type(results).__name__}")
        doc = {
            "schema_version": SCHEMA_VERSION, "experiment": exp.name, "preset": preset, "config": config,
            "seeds": ctx.seeds, "started": started, "finished": _now(),
            # this process's time plus the training earlier processes of a resumed run did (see RunContext.restored_s)
            "time_s": round(time.perf_counter() - t0 + ctx.restored_s, 3), "time_restored_s": round(ctx.restored_s, 3),
            "env": env_info(dev, world.world_size), "results": to_jsonable(results),
        }
        if ctx.is_main:
            save_json(out_dir / RESULTS_FILE, doc)
            ctx.log(f"wrote {out_dir / RESULTS_FILE}")
        ddp.barrier()
        return doc
    finally:
        ddp.shutdown(world)


def env_info(device: torch.device, world_size: int) -> dict:
    from ... import __version__ as attnkit_version

    info = {"torch": torch.__version__, "python": platform.python_version(), "threads": torch.get_num_threads(),
            "platform": f"{platform.system()} {platform.machine()}", "device": str(device), "world_size": world_size,
            "attnkit": attnkit_version}
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
