"""Per-rank peak memory of ring attention at world sizes 1, 2, 4 vs single-process attention.

What is measured: for each configuration, fresh processes are spawned (a gloo group of W ranks on
this machine, or one plain process for the single-process baselines). In each process, after the
inputs exist, the Linux peak-RSS counter is reset (``echo 5 > /proc/self/clear_refs``), the
current RSS is read (VmRSS), one attention call runs (forward, or forward + backward), and the
peak RSS since the reset is read (VmHWM). Reported: ``VmHWM - VmRSS_before`` in MiB, i.e. the
extra resident memory the call needed at its peak on that rank -- everything torch allocated on
the CPU (``tracemalloc`` would not see torch's allocations), communication buffers included,
the inputs themselves excluded. Where clear_refs is not writable, ``ru_maxrss`` minus the RSS
before the call is used instead (an upper bound: it includes any earlier peak).

Baselines on the full sequence in one process: ``naive`` (materialised L x L scores and
``torch.softmax``, what ring attention's blocks do per block) and ``sdpa``
(``torch.nn.functional.scaled_dot_product_attention``, PyTorch's fused CPU kernel, which never
materialises the whole score matrix). All W ranks share this machine's cores, so the seconds are
not a speed benchmark.

Run:  PYTHONPATH=src python benchmarks/ring_memory.py  [--n 8192 --heads 8 --dim 64 --batch 1]
Saves benchmarks/results/ring_memory.json and prints a table.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import resource
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: the shared helpers
from common import record, reset_peak, status_kib  # noqa: E402

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

RESULTS = Path(__file__).resolve().parent / "results" / "ring_memory.json"




def _naive(q, k, v, causal):
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5  # (B, H, L, L) materialised
    if causal:
        L = q.shape[2]
        s = s.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def _rank_main(rank: int, world_size: int, port: int, cfg: dict, results) -> None:
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    method = cfg["method"]
    if method == "ring":
        from attnkit.distributed import ring_attention

        store = dist.TCPStore("127.0.0.1", port, world_size, is_master=False, timeout=timedelta(seconds=120))
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
    B, H, E, n = cfg["batch"], cfg["heads"], cfg["dim"], cfg["n"]
    L = n // world_size if method == "ring" else n
    backward = cfg["mode"] == "forward+backward"
    g = torch.Generator().manual_seed(rank)
    q, k, v = (torch.randn(B, H, L, E, generator=g).requires_grad_(backward) for _ in range(3))
    dout = torch.randn(B, H, L, E, generator=g) if backward else None
    if method == "ring":
        dist.barrier()  # all ranks ready: the timed call is the ring alone
    exact = reset_peak()
    rss_before = status_kib("VmRSS")
    start = time.perf_counter()
    with torch.set_grad_enabled(backward):
        if method == "ring":
            out = ring_attention(q, k, v, causal=cfg["causal"], layout="zigzag" if cfg["causal"] else "contiguous").out
        elif method == "sdpa":
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=cfg["causal"])
        else:
            out = _naive(q, k, v, cfg["causal"])
        if backward:
            out.backward(dout)
    seconds = time.perf_counter() - start
    peak_kib = status_kib("VmHWM") if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    results.put((rank, {"peak_mib": (peak_kib - rss_before) / 1024, "seconds": seconds, "exact": exact}))
    if method == "ring":
        dist.barrier()
        dist.destroy_process_group()


def run_config(cfg: dict, world_size: int) -> list[dict]:
    """One configuration in fresh processes; returns the per-rank measurements."""
    ctx = mp.get_context("spawn")
    store = dist.TCPStore("127.0.0.1", 0, world_size + 1, is_master=True, wait_for_workers=False)
    results = ctx.Queue()
    procs = [ctx.Process(target=_rank_main, args=(r, world_size, store.port, cfg, results)) for r in range(world_size)]
    for p in procs:
        p.start()
    per_rank = dict(results.get(timeout=1800) for _ in range(world_size))
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"a rank of {cfg} exited with {p.exitcode}")
    return [per_rank[r] for r in range(world_size)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=8192, help="full sequence length")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--world-sizes", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--modes", nargs="+", default=["forward", "forward+backward"], choices=["forward", "forward+backward"])
    ap.add_argument("--causal", action="store_true", help="causal mask (ring uses the zigzag layout)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()

    base = dict(n=args.n, batch=args.batch, heads=args.heads, dim=args.dim, causal=args.causal)
    rows = []
    for mode in args.modes:
        plan = [("naive", 1), ("sdpa", 1)] + [("ring", w) for w in args.world_sizes]
        for method, world_size in plan:
            cfg = dict(base, method=method, mode=mode)
            per_rank = run_config(cfg, world_size)
            row = dict(
                method=method,
                world_size=world_size,
                mode=mode,
                per_rank_peak_mib=[round(r["peak_mib"], 1) for r in per_rank],
                max_peak_mib=round(max(r["peak_mib"] for r in per_rank), 1),
                seconds=round(max(r["seconds"] for r in per_rank), 2),
                exact_peak_reset=all(r["exact"] for r in per_rank),
            )
            rows.append(row)
            print(f"  done {method} W={world_size} {mode}: {row['max_peak_mib']} MiB", flush=True)

    scores_mib = args.batch * args.heads * args.n * args.n * 4 / 2**20
    report = dict(
        benchmark="ring_memory",
        measure="per-rank peak RSS increase during one call: VmHWM (reset via /proc/self/clear_refs) minus VmRSS before, MiB",
        config=dict(base, dtype="float32", threads_per_rank="cpu_count // world_size", backend="gloo (CPU)"),
        full_score_matrix_mib=round(scores_mib, 1),
        machine=dict(platform=platform.platform(), cpus=os.cpu_count(), torch=torch.__version__),
        rows=rows,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record(args.out, report, indent=2)

    print(f"\nn={args.n} B={args.batch} H={args.heads} E={args.dim} fp32 causal={args.causal}; "
          f"one full L x L score matrix = {scores_mib:.0f} MiB")
    print(f"{'mode':<17} {'method':<6} {'W':>2} {'peak MiB/rank (max)':>20} {'per rank':>28} {'s':>7}")
    for r in rows:
        print(f"{r['mode']:<17} {r['method']:<6} {r['world_size']:>2} {r['max_peak_mib']:>20.1f} "
              f"{str(r['per_rank_peak_mib']):>28} {r['seconds']:>7.2f}")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
