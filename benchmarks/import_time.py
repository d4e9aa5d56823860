"""What ``import attnkit`` costs after ``import torch``: seconds, modules and resident memory.

Each sample is a fresh interpreter that imports torch, then times ``import attnkit`` alone
(``time.perf_counter`` around the import, and ``time.process_time``: the CPU time, which other
processes on a shared machine inflate far less than the wall-clock time), counts the modules it added to ``sys.modules``, reads
the resident set size (``VmRSS``) before and after, and says whether the compiler stack
(``torch._dynamo``, ``torch.onnx``, ``sympy``) was loaded. A second probe in the same interpreter
then runs one eager ``attnkit.attention(q, k, v, mask=causal)`` per exact backend and reports
whether that loaded ``torch._dynamo``.

With ``--before-src`` (the ``src/`` of another checkout, e.g. ``git worktree add /tmp/old HEAD``)
the same probe runs on that code too; the two variants alternate run by run, so load drift on a
shared machine hits both alike; the 1-minute load average at the start and the end is saved with
the results. Medians of ``--runs`` fresh processes per variant. The limit checked is 0.3 s for
``import attnkit`` after torch (``within_limit``: wall clock, ``within_limit_cpu``: CPU time).

    OMP_NUM_THREADS=1 python benchmarks/import_time.py --before-src /tmp/old/src
    # → benchmarks/results/import_time.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import torch

from common import record

RESULTS = Path(__file__).resolve().parent / "results"
THIS_SRC = Path(__file__).resolve().parent.parent / "src"
LIMIT_S = 0.3
STACK = ("torch._dynamo", "torch.onnx", "sympy")

PROBE = f"""
import json, sys, time

def rss_mb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024

import torch
before, rss0 = set(sys.modules), rss_mb()
t0, c0 = time.perf_counter(), time.process_time()
import attnkit
seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
row = {{
    "seconds": seconds,
    "cpu_seconds": cpu_seconds,
    "modules": len(set(sys.modules) - before),
    "rss_mb": rss_mb() - rss0,
    "file": attnkit.__file__,
    "loaded": {{m: m in sys.modules for m in {STACK!r}}},
}}
q = torch.randn(1, 2, 16, 8)
for backend in ("sdpa", "blockwise", "reference"):
    attnkit.attention(q, q, q, mask=attnkit.masks.causal(), backend=backend)
row["dynamo_after_calls"] = "torch._dynamo" in sys.modules
print(json.dumps(row))
"""


def sample(src: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    row = json.loads(done.stdout.strip().splitlines()[-1])
    if not Path(row["file"]).resolve().is_relative_to(src.resolve()):
        raise RuntimeError(f"the probe imported {row['file']}, not attnkit from {src}")
    return row


def summarize(rows: list[dict], src: Path) -> dict:
    return {
        "src": str(src),
        "import_s_median": statistics.median(r["seconds"] for r in rows),
        "import_s_all": [r["seconds"] for r in rows],
        "import_cpu_s_median": statistics.median(r["cpu_seconds"] for r in rows),
        "modules_median": statistics.median(r["modules"] for r in rows),
        "rss_mb_median": statistics.median(r["rss_mb"] for r in rows),
        "loaded_on_import": rows[0]["loaded"],
        "dynamo_after_eager_calls": rows[0]["dynamo_after_calls"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9, help="fresh processes per variant (median)")
    ap.add_argument("--before-src", type=Path, help="src/ of the code to compare against")
    ap.add_argument("--out", type=Path, default=RESULTS / "import_time.json")
    args = ap.parse_args()
    variants = {"after": THIS_SRC}
    if args.before_src is not None:
        variants = {"before": args.before_src, **variants}
    rows: dict[str, list[dict]] = {name: [] for name in variants}
    load_before = os.getloadavg()[0]
    for name, src in variants.items():  # warm-up: the page cache holds torch's files for every sample
        sample(src)
    for _ in range(args.runs):
        for name, src in variants.items():
            rows[name].append(sample(src))
    result = {
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "runs": args.runs,
        "cpus": os.cpu_count(),
        "load_average_1min": [load_before, os.getloadavg()[0]],  # at the start and the end: a shared machine
        "limit_s": LIMIT_S,
        **{name: summarize(rows[name], src) for name, src in variants.items()},
    }
    result["within_limit"] = result["after"]["import_s_median"] <= LIMIT_S
    result["within_limit_cpu"] = result["after"]["import_cpu_s_median"] <= LIMIT_S
    if "before" in result:
        result["speedup"] = result["before"]["import_s_median"] / result["after"]["import_s_median"]
    for name in variants:
        r = result[name]
        print(f"{name:>6}: import attnkit {r['import_s_median']:.3f} s ({r['import_cpu_s_median']:.3f} s CPU), "
              f"{r['modules_median']:.0f} modules, "
              f"{r['rss_mb_median']:.1f} MB; loaded {r['loaded_on_import']}; dynamo after eager calls: "
              f"{r['dynamo_after_eager_calls']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record(args.out, result)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
