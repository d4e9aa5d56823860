"""Wall-clock time of the quick default of ``attnkit report`` (every section rerun with ``--force``),
measured once, for the README's claim (the quick report runs in ≤ 10 minutes on 2 cores).

    python benchmarks/report_time.py   # → benchmarks/results/report_quick_time.json

It runs the installed ``attnkit`` command in a child process from the repository root (so the
committed ``results/`` are read, as after a fresh clone) and records wall, user and system time,
the child's peak memory and the load average before and after (other work on a shared machine
slows it; the load says how much).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from common import record

ROOT = Path(__file__).resolve().parents[1]


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv=None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "report_quick_time.json", help="JSON path")
    ap.add_argument("--report-dir", default="/tmp/attnkit-report-time", help="where the report is written (deleted first)")
    args = ap.parse_args(argv)
    import torch

    shutil.rmtree(args.report_dir, ignore_errors=True)
    exe = Path(sys.executable).with_name("attnkit")
    cmd = [str(exe), "report", "--out", args.report_dir, "--force"]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    started, load0, t0 = datetime.now(timezone.utc), _load(), time.perf_counter()
    rc = subprocess.run(cmd, cwd=ROOT, env=env).returncode
    wall = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    doc = {
        "what": "wall-clock time of the quick default of `attnkit report` (all sections rerun), measured once",
        "command": f"attnkit report --out {args.report_dir} --force",
        "env": {"OMP_NUM_THREADS": env["OMP_NUM_THREADS"], "cpus": os.cpu_count(), "torch": torch.__version__,
                "python": platform.python_version()},
        "code": f"commit {commit} (the working tree, committed results/ and benchmarks/results/ present)",
        "started_utc": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "rc": rc,
        "wall_s": round(wall, 2),
        "user_s": round(ru.ru_utime, 2),
        "system_s": round(ru.ru_stime, 2),
        "max_rss_mib": round(ru.ru_maxrss / 1024, 1),
        "load_average_1_5_15": {"at_start": load0, "at_end": _load()},
    }
    record(args.out, doc)
    print(json.dumps(doc, indent=1))
    return args.out


if __name__ == "__main__":
    main()
