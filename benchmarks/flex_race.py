"""attnkit's blockwise backend on PyTorch's fused CPU kernel vs compiled FlexAttention and SDPA.

Each (case, implementation) runs in a fresh subprocess with one thread (``torch.set_num_threads(1)``,
``OMP_NUM_THREADS=1``) and large allocations returned to the OS on free (``MALLOC_MMAP_THRESHOLD_``),
so resident memory tracks what is live:

* time: one warm-up call, then the median of ``--reps`` calls (forward, or forward + backward);
* memory: after the warm-up the Linux peak-RSS counter is reset (``echo 5 > /proc/self/clear_refs``),
  VmRSS is read, one more call runs, and VmHWM - VmRSS is the peak above the inputs (torch's
  allocations are invisible to ``tracemalloc``). The first call's time is reported separately
  (for FlexAttention it is the compile).

Implementations (what is compared in the same run, on the same inputs):

* ``attnkit_auto`` — ``attnkit.attention`` with backend ``auto``; the report's path is recorded;
* ``blockwise_fused`` — backend ``blockwise`` (the fused kernel where it serves the call);
* ``blockwise_tiles`` — the same backend with the fused kernel switched off (its Python tile loop);
* ``flex`` — ``torch.compile(flex_attention)`` with ``create_block_mask`` (CPU: forward only);
* ``sdpa_mask`` — SDPA with the dense bool mask; ``sdpa_causal`` — SDPA ``is_causal`` (top-left:
  for L < S a timing yardstick only, its mask is not attnkit's bottom-right one);
* ``blockwise_before`` — backend ``blockwise`` on the code under ``--before-src`` (a checkout of an
  earlier commit, e.g. the one the performance goals were set against); its rows are skipped
  without that option, and the other rows of the case get ``speedup_vs_blockwise_before``.

Ratios are against the named baseline of each case from the same run. The goal of the fused
route's forward + backward (:data:`GOALS`: window 256, n = 16k, fp32) is checked against its row,
printed at the end and saved under ``"goals"``. The CPU's flags
(avx512_bf16, amx) are recorded from /proc/cpuinfo.

Run:  PYTHONPATH=src python benchmarks/flex_race.py [--quick] [--reps 5] [--only CASE] [--rows PATTERNS] [--redo]
      [--runs K]   (K fresh processes per row; the goal's row is measured with --runs 5)
      [--before-src /tmp/before/src]   (rows ``blockwise_before``: that code's src/)
      [--tag NAME]   (another machine's run: saved to flex_race_NAME.json, the committed file left alone)
Saves benchmarks/results/flex_race.json (flex_race_quick.json with --quick) after every row; a run
resumes: rows the file already holds are skipped unless ``--redo`` (with ``--rows`` to pick them).
Each row records the 1-minute load average when it finished, the allowed pairs per head and the
time per allowed pair (``ns_per_pair``: the rate per useful FLOP, comparable across masks), and
the host's float32 matmul rate just before its timed calls (``sgemm_gflops``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: the shared helpers
from common import B, CHUNK, DOCS, E, H, PREFIX, WINDOW, cpu_flags, race_call, race_mask, record, tag_suffix, time_and_peak  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"

# case: (mask kind, L, S, dtype, mode, implementations, baseline for ratios)
CASES = {
    "window256_16k_fp32_fwd": ("window", 16384, 16384, "float32", "fwd",
                               ["attnkit_auto", "blockwise_fused", "blockwise_tiles", "blockwise_before", "flex", "sdpa_mask"],
                               "flex"),
    "window256_4k_fp32_fwd": ("window", 4096, 4096, "float32", "fwd",
                              ["blockwise_fused", "blockwise_tiles", "flex", "sdpa_mask"], "sdpa_mask"),
    "window256_4k_bf16_fwd": ("window", 4096, 4096, "bfloat16", "fwd",
                              ["blockwise_fused", "blockwise_tiles", "flex", "sdpa_mask"], "sdpa_mask"),
    "window256_16k_fp32_fwdbwd": ("window", 16384, 16384, "float32", "fwdbwd",
                                  ["blockwise_fused", "blockwise_tiles", "blockwise_before"], "blockwise_tiles"),
    # forward + backward against SDPA's fused CPU kernel with the dense mask (too slow at 16k)
    "window256_4k_fp32_fwdbwd": ("window", 4096, 4096, "float32", "fwdbwd",
                                 ["blockwise_fused", "blockwise_tiles", "sdpa_mask"], "sdpa_mask"),
    "window256_4k_bf16_fwdbwd": ("window", 4096, 4096, "bfloat16", "fwdbwd",
                                 ["blockwise_fused", "blockwise_tiles", "sdpa_mask"], "sdpa_mask"),
    "causal_8k_fp32_fwd": ("causal", 8192, 8192, "float32", "fwd",
                           ["attnkit_auto", "blockwise_fused", "flex", "sdpa_causal"], "sdpa_causal"),
    "causal_prefix_2k_8k_fp32_fwd": ("causal", 2048, 8192, "float32", "fwd",
                                     ["attnkit_auto", "blockwise_fused", "flex", "sdpa_causal", "sdpa_mask"], "sdpa_causal"),
    "causal_4k_fp32_fwdbwd": ("causal", 4096, 4096, "float32", "fwdbwd",
                              ["blockwise_fused", "blockwise_tiles", "sdpa_causal"], "sdpa_causal"),
    # masks served by the tile-state path; compare ns_per_pair with the window case's
    "document_16k_fp32_fwd": ("document", 16384, 16384, "float32", "fwd", ["blockwise_fused", "flex"], "flex"),
    "chunked_16k_fp32_fwd": ("chunked", 16384, 16384, "float32", "fwd", ["blockwise_fused", "flex"], "flex"),
    "prefix_lm_16k_fp32_fwd": ("prefix_lm", 16384, 16384, "float32", "fwd", ["blockwise_fused", "flex"], "flex"),
}
# the performance goal of the fused route's forward + backward, checked against the measured row
GOALS = {"window256_16k_fp32_fwdbwd:blockwise_fused": {"median_ms": 450.0, "peak_above_inputs_mib": 150.0}}
SLOW_REPS = {"sdpa_mask": 2, "blockwise_tiles": 2, "blockwise_before": 2}  # at n >= 16k: dense-mask and Python baselines, medians of fewer calls
QUICK_N = 512


def goals(rows: list[dict]) -> dict:
    """Each goal of :data:`GOALS` with the measured values of its row (skipped until it is measured)."""
    out = {}
    for name, goal in GOALS.items():
        case, impl = name.split(":")
        row = next((r for r in rows if r["case"] == case and r["impl"] == impl and "median_ms" in r), None)
        if row is not None:
            measured = {k: row[k] for k in goal}
            out[name] = {"goal": goal, "measured": measured, "met": all(measured[k] <= goal[k] for k in goal)}
    return out


def useful_pairs(kind, L, S) -> int:
    """Allowed (query, key) pairs per head: the useful work, counted on the mask 1024 rows at a time."""
    mask = race_mask(kind, L, S)
    return sum(int(mask.evaluate((q0, min(q0 + 1024, L)), (0, S), L, S).sum()) for q0 in range(0, L, 1024))


def worker(case: str, impl: str, reps: int, quick: bool) -> dict:
    import torch

    torch.set_num_threads(1)
    kind, L, S, dtype, mode, _, _ = CASES[case]
    if quick:
        L, S = (QUICK_N, QUICK_N) if L == S else (QUICK_N // 4, QUICK_N)
    dt = getattr(torch, dtype)
    g = torch.Generator().manual_seed(0)
    back = mode == "fwdbwd"
    q = torch.randn(B, H, L, E, generator=g).to(dt).requires_grad_(back)
    k = torch.randn(B, H, S, E, generator=g).to(dt).requires_grad_(back)
    v = torch.randn(B, H, S, E, generator=g).to(dt).requires_grad_(back)
    dout = torch.randn(B, H, L, E, generator=g).to(dt) if back else None
    fn, label = race_call(kind, L, S, dt, impl)
    if L * S >= 16384 ** 2 and impl in SLOW_REPS:
        reps = min(reps, SLOW_REPS[impl])
    path = None

    def once():
        nonlocal path
        res = fn(q, k, v)
        out = res.out if hasattr(res, "out") else res
        if hasattr(res, "report"):
            path = f"{res.report.backend}: {res.report.reason}"
        if back:
            torch.autograd.grad(out, (q, k, v), dout)
        return out

    gemm = sgemm_gflops()
    with torch.no_grad() if not back else torch.enable_grad():
        first, times, peak, exact, out = time_and_peak(once, reps)
    out_mib = out.numel() * out.element_size() / 2**20
    pairs = useful_pairs(kind, L, S)
    med = statistics.median(times)
    return {"case": case, "impl": impl, "L": L, "S": S, "dtype": dtype, "mode": mode, "reps": reps,
            "median_ms": med * 1e3, "times_ms": [t * 1e3 for t in times], "useful_pairs_per_head": pairs,
            "ns_per_pair": med * 1e9 / (pairs * B * H),
            "first_call_ms": first * 1e3, "peak_above_inputs_mib": peak / 1024, "output_mib": out_mib,
            "peak_exact": exact, "path": path if label else impl, "sgemm_gflops": gemm}


def sgemm_gflops() -> float:
    """The host's speed just before a row's timed calls: GFLOP/s of a 2048² float32 matmul on one
    thread (median of 7 after 2 warm-ups), so rows measured on a slower moment of a shared host show it."""
    import time

    import torch

    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    for _ in range(2):
        a @ b
    ts = []
    for _ in range(7):
        t0 = time.perf_counter()
        a @ b
        ts.append(time.perf_counter() - t0)
    return 2 * 2048 ** 3 / statistics.median(ts) / 1e9


def _runs(cmd: list[str], env: dict, runs: int, case: str, impl: str) -> dict:
    """One row from ``runs`` fresh worker processes: with more than one, ``median_ms`` is the median
    of the runs' medians (``run_medians_ms`` lists them, in order), ``times_ms`` holds every call,
    and the peak is the largest run's. On this shared 2-core host one process's median of
    five calls drifts by up to a tenth from the next process's (the window's forward+backward at
    16k: 418 to 494 ms on one day, the same code), more than the calls inside a run."""
    got = []
    for _ in range(runs):
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if p.returncode != 0:
            return {"case": case, "impl": impl, "error": p.stderr.strip().splitlines()[-1:] or ["failed"],
                    "loadavg_1min": os.getloadavg()[0]}
        got.append(json.loads(p.stdout.strip().splitlines()[-1]))
    row = dict(got[0])
    if runs > 1:
        row["run_medians_ms"] = [r["median_ms"] for r in got]
        row["median_ms"] = statistics.median(row["run_medians_ms"])
        row["ns_per_pair"] = row["median_ms"] * 1e6 / (row["useful_pairs_per_head"] * B * H)
        row["times_ms"] = [t for r in got for t in r["times_ms"]]
        row["peak_above_inputs_mib"] = max(r["peak_above_inputs_mib"] for r in got)
        row["peak_exact"] = all(r["peak_exact"] for r in got)
        row["run_sgemm_gflops"] = [r["sgemm_gflops"] for r in got]
    row["loadavg_1min"] = os.getloadavg()[0]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"n = {QUICK_N}: a smoke run of every case")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", default=None, help="run only cases whose name contains this")
    ap.add_argument("--rows", default=None,
                    help="comma-separated patterns; run only rows whose 'case:impl' contains one (e.g. 'window256_16k,causal_8k:sdpa')")
    ap.add_argument("--redo", action="store_true", help="re-measure rows the saved JSON already holds (default: resume)")
    ap.add_argument("--runs", type=int, default=1,
                    help="fresh processes per row; above 1 a row's median_ms is the median of the runs' medians")
    ap.add_argument("--before-src", default=None, help="src/ of earlier code, for the blockwise_before rows")
    ap.add_argument("--tag", default=None, help="save to flex_race_TAG.json (another machine's run)")
    ap.add_argument("--worker", nargs=2, metavar=("CASE", "IMPL"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker, args.reps, args.quick)))
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "65536",
           "MALLOC_TRIM_THRESHOLD_": "0"}
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    import torch

    name = "flex_race" + ("_quick" if args.quick else "") + tag_suffix(ap, args.tag)
    path = RESULTS / f"{name}.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    # resume: rows the saved file holds (without an error) are kept unless they are re-run here
    rows = [r for r in old.get("rows", []) if "error" not in r and r.get("case") in CASES]
    patterns = [p for p in (args.rows or "").split(",") if p]

    def wanted(case, impl):
        name = f"{case}:{impl}"
        return (not args.only or args.only in case) and (not patterns or any(p in name for p in patterns))

    before_src = old.get("before_src")
    if args.before_src:  # the earlier code's path and, where it is a git checkout, its commit
        head = subprocess.run(["git", "-C", args.before_src, "rev-parse", "HEAD"], capture_output=True, text=True)
        before_src = {"src": args.before_src, "commit": head.stdout.strip() if head.returncode == 0 else None}

    def save():
        for case, (*_, base) in CASES.items():
            for r in rows:
                if r["case"] == case and "median_ms" in r:
                    for key in [k for k in r if k.startswith("speedup_vs_")]:
                        del r[key]
            for b in dict.fromkeys((base, "blockwise_before")):
                base_row = next((r for r in rows if r["case"] == case and r["impl"] == b and "median_ms" in r), None)
                for r in rows:
                    if base_row and r["case"] == case and "median_ms" in r:
                        r["speedup_vs_" + b] = base_row["median_ms"] / r["median_ms"]
        out = {"what": __doc__.splitlines()[0], "torch": torch.__version__, "threads": 1, "quick": args.quick,
               "B": B, "H": H, "E": E, "window": WINDOW, "docs": DOCS, "chunk": CHUNK, "prefix": PREFIX,
               "cpu": cpu_flags(), "reps": args.reps, "slow_reps": SLOW_REPS, "before_src": before_src,
               "loadavg_at_save": os.getloadavg()[0], "goals": {} if args.quick else goals(rows), "rows": rows}
        record(path, out)

    for case, (_, _, _, _, _, impls, base) in CASES.items():
        for impl in impls:
            done = any(r["case"] == case and r["impl"] == impl for r in rows)
            if not wanted(case, impl) or (done and not args.redo) or (impl == "blockwise_before" and not args.before_src):
                continue
            cmd = [sys.executable, __file__, "--worker", case, impl, "--reps", str(args.reps)] + (["--quick"] if args.quick else [])
            run_env = env if impl != "blockwise_before" else dict(env, PYTHONPATH=args.before_src)
            row = _runs(cmd, run_env, args.runs, case, impl)
            rows[:] = [r for r in rows if not (r["case"] == case and r["impl"] == impl)] + [row]
            save()  # after every row: an interrupted run resumes where it stopped
            print(json.dumps({k: (round(v, 1) if isinstance(v, float) else v) for k, v in row.items() if k != "times_ms"}), flush=True)
    save()
    for name, g in ({} if args.quick else goals(rows)).items():  # the goals are for the full sizes
        print(f"goal {name}: " + ", ".join(f"{k} {g['measured'][k]:.1f} (goal <= {g['goal'][k]:g})" for k in g["goal"])
              + f": {'met' if g['met'] else 'not met'}")
    print("saved", path)


if __name__ == "__main__":
    main()
