"""``attnkit experiment`` run as a user runs it, in subprocesses: ``kill -9`` mid-training then
``--resume`` ends bit-identical to an uninterrupted run; a torchrun world-size-2 DDP run matches one
process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

# one intra-op thread everywhere: bit-exact comparisons need the same thread count in every run
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
CLI = [sys.executable, "-m", "attnkit.cli", "experiment"]
TINY = ["tiny", "--no-progress", "--set", "n_train=256", "--set", "epochs=5"]
TINY_OVERRIDES = {"n_train": 256, "epochs": 5}


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], env=ENV, capture_output=True, text=True, timeout=timeout)


def metrics(out: Path) -> dict:
    """Per seed: the final metrics and the history, without wall times."""
    res = json.loads((Path(out) / "results.json").read_text())["results"]
    strip = lambda row: {k: v for k, v in row.items() if k != "time_s"}  # noqa: E731
    return {s: {**{k: v for k, v in r.items() if k != "history"}, "history": [strip(h) for h in r["history"]]}
            for s, r in res["seeds"].items()}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The uninterrupted one-process run, in this process with one thread like the subprocesses."""
    from attnkit.experiments import run_experiment

    out = tmp_path_factory.mktemp("reference")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run_experiment("tiny", out=out, overrides=TINY_OVERRIDES, show_progress=False)
    finally:
        torch.set_num_threads(threads)
    return out


def test_kill_9_mid_training_then_resume_equals_an_uninterrupted_run(tmp_path, reference):
    ref, cut = reference, tmp_path / "cut"

    # sleep after each epoch so the kill lands between the first checkpoint and the end
    proc = subprocess.Popen([*CLI, *TINY, "--epoch-sleep", "1.0", "--out", str(cut)], env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpt = cut / "checkpoints" / "reverser-seed0.pt"
    deadline = time.monotonic() + 90
    while not ckpt.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    assert not state["finished"] and 1 <= state["epoch"] < 5, "the kill must land mid-run"
    assert not (cut / "results.json").exists()

    resumed = run_cli(*TINY, "--out", str(cut), "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming after epoch {state['epoch']}/5" in resumed.stderr
    assert metrics(cut) == metrics(ref)  # exactly: same seed, same threads, restored RNG and optimizer
    # the run's time counts the killed process's training too (restored from the checkpoint)
    doc = json.loads((cut / "results.json").read_text())
    assert doc["time_restored_s"] == pytest.approx(state["time_s"], abs=1e-3) and doc["time_s"] > doc["time_restored_s"] > 0

    # a finished tag is not trained again, and the results stay the same
    from attnkit.experiments import run_experiment

    mtime = ckpt.stat().st_mtime_ns
    run_experiment("tiny", out=cut, resume=True, overrides=TINY_OVERRIDES, show_progress=False)
    assert ckpt.stat().st_mtime_ns == mtime
    assert metrics(cut) == metrics(ref)


def test_torchrun_two_processes_match_one(tmp_path, reference):
    one, two = reference, tmp_path / "two"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           "-m", "attnkit.cli", "experiment", *TINY, "--out", str(two)]
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads((two / "results.json").read_text())
    assert doc["env"]["world_size"] == 2
    assert p.stdout.count("done in") == 1  # rank 1 neither prints nor writes
    a, b = metrics(one)["0"], metrics(two)["0"]
    assert len(a["history"]) == len(b["history"]) == 5
    for ra, rb in zip(a["history"], b["history"]):  # the same global batches: equal up to float summation order
        for k in ("train_loss", "val_loss"):
            assert rb[k] == pytest.approx(ra[k], rel=1e-3, abs=1e-5), (ra, rb)
    assert b["val_acc"] == pytest.approx(a["val_acc"], abs=1e-3)
