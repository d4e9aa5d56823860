"""Report section: ring attention across processes, started by ``torchrun`` as a user would.

Runs :mod:`attnkit.distributed.demo` on 2 and 4 gloo ranks (causal, zigzag, a length that does not
divide evenly), which checks the gathered output and gradient against single-process SDPA, and
quotes the committed per-rank memory benchmark (``benchmarks/ring_memory.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ...experiments.lab.committed import committed
from ...page.html import esc, table


def _torchrun(world_size: int, out_json: Path, timeout: float = 180.0) -> dict:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world_size}",
           "-m", "attnkit.distributed.demo", "--causal", "--layout", "zigzag", "--json", str(out_json)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if p.returncode != 0 or not out_json.exists():
        tail = "\n".join((p.stderr or p.stdout).strip().splitlines()[-5:])
        raise RuntimeError(f"torchrun with {world_size} ranks failed (exit {p.returncode}): {tail}")
    return json.loads(out_json.read_text())


def _memory_rows(root: Path | None = None) -> list[list[object]]:
    path = committed("ring_memory.json", root)
    if path is None:
        return []
    rows = json.loads(path.read_text())["rows"]
    return [[r["mode"], r["method"], r["world_size"], f"{r['max_peak_mib']:.0f}"] for r in rows]


def ring_section(out: Path, root: Path | None = None) -> str:
    folder = out / "ring"
    folder.mkdir(parents=True, exist_ok=True)
    runs = [_torchrun(w, folder / f"ring_w{w}.json") for w in (2, 4)]
    html = (
        "<p><code>torchrun --nproc-per-node W -m attnkit.distributed.demo --causal --layout zigzag</code>, "
        "gloo on this CPU, run now. Every rank holds a shard of a 1,000-token sequence (padded to a "
        "multiple of 2W inside), K/V shards travel around the ring, partial results merge by "
        "log-sum-exp; rank 0 gathers and compares with single-process SDPA.</p>"
    )
    html += table(
        ["ranks", "shard per rank", "max |out − SDPA|", "max |dq − SDPA dq|", "rank 0 fwd+bwd s"],
        [[r["world_size"], r["shard_len"], f"{r['max_abs_out_diff']:.1e}", f"{r['max_abs_dq_diff']:.1e}",
          f"{r['rank0_seconds_fwd_bwd']:.2f}"] for r in runs],
    )
    mem = _memory_rows(root)
    if mem:
        html += ("<h3>Per-rank peak memory, n = 8,192, B=1, H=8, E=64, fp32 (committed "
                 "<code>benchmarks/results/ring_memory.json</code>)</h3><p>Measured in fresh processes; "
                 "<em>naive</em> materializes the (L, L) scores, <em>sdpa</em> is PyTorch's fused kernel in one "
                 "process.</p>")
        html += table(["mode", "method", "ranks", "peak MiB per rank"], mem)
    return html + f"<p class=\"note\">Results: {esc(folder.name)}/ring_w*.json</p>"
