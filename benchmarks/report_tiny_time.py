"""Wall-clock time of the tiny ``attnkit report`` (every section rerun, both languages) for two
source trees, to compare the same page before and after a change of the code's layout.

Each run is a fresh process (imports included) writing a fresh report folder with ``--force``
semantics (an empty folder: nothing cached); runs alternate between the trees so a busy machine
slows both alike; the medians and their ratio are saved.

    python benchmarks/report_tiny_time.py --tree before=/tmp/attnkit-before/src --tree after=src \\
        --committed /tmp/attnkit-before/results --repeats 3   # → benchmarks/results/report_tiny_time.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import record

ROOT = Path(__file__).resolve().parents[1]
RUN = """
import sys, time
t0 = time.perf_counter()
from attnkit.report.build import write_report
out, bench, committed = sys.argv[1:4]
for lang in ("en", "zh"):
    run = write_report(out, size="tiny", runs=out + "/no-runs", bench_results=bench, committed_results=committed,
                       lang=lang, log=lambda m: None)
    assert not run.failed, run.failed
print(time.perf_counter() - t0)
"""


def one_run(src: Path, bench: Path, committed: Path) -> tuple[float, float]:
    """(wall seconds inside the process, CPU seconds of the process: user + system)."""
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory() as d:
        proc = subprocess.run([sys.executable, "-c", RUN, str(Path(d) / "report"), str(bench), str(committed)],
                              env=env, capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return float(proc.stdout.strip().splitlines()[-1]), cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", required=True, metavar="LABEL=SRC", help="a label and a src/ folder holding attnkit")
    ap.add_argument("--committed", type=Path, default=ROOT / "results", help="the committed runs both trees show")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "report_tiny_time.json")
    args = ap.parse_args()
    trees = dict(t.split("=", 1) for t in args.tree)
    times: dict[str, list[float]] = {label: [] for label in trees}
    cpus: dict[str, list[float]] = {label: [] for label in trees}
    for i in range(args.repeats):
        for label, src in trees.items():
            s, cpu = one_run(Path(src).resolve(), ROOT / "benchmarks" / "results", args.committed)
            times[label].append(round(s, 2))
            cpus[label].append(round(cpu, 2))
            print(f"[{i + 1}/{args.repeats}] {label}: {s:.1f} s wall, {cpu:.1f} s CPU", flush=True)
    medians = {label: statistics.median(v) for label, v in times.items()}
    cpu_medians = {label: statistics.median(v) for label, v in cpus.items()}
    labels = list(trees)
    doc = {
        "what": "seconds of the tiny attnkit report (en + zh, nothing cached, imports included), per source tree: "
                "wall inside the process, and CPU (user + system) of the process, less sensitive to a busy machine",
        "trees": trees, "repeats": args.repeats, "seconds": times, "median_s": medians, "cpu_s": cpus, "median_cpu_s": cpu_medians,
        "ratio": {f"{b}/{labels[0]}": round(medians[b] / medians[labels[0]], 3) for b in labels[1:]},
        "cpu_ratio": {f"{b}/{labels[0]}": round(cpu_medians[b] / cpu_medians[labels[0]], 3) for b in labels[1:]},
        "threads": os.environ.get("OMP_NUM_THREADS", "1"), "load_avg_1min_at_end": round(os.getloadavg()[0], 2),
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    record(args.out, doc)
    print(json.dumps(doc["median_s"]), json.dumps(doc["ratio"]), json.dumps(doc["cpu_ratio"]), f"→ {args.out}")


if __name__ == "__main__":
    main()
