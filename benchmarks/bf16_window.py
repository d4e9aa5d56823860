"""bf16 vs float32 on the blockwise backend's banded fused path: a causal window of 256 keys at n = 4096.

Three measurements, in one process with one thread, interleaved call by call so load drift hits
every variant alike (medians of ``--reps`` calls after one warm-up):

* ``route`` — ``attnkit.attention(q, k, v, mask=masks.sliding_window(255, 0), backend="blockwise")``
  in float32 and bf16, forward (``torch.no_grad()``), with the band tuned per dtype (block size and
  key padding, :func:`attnkit.backends.blockwise.kernel.band.tuned`) and, as the same-run baseline,
  untuned (``--no-untuned`` skips it): the ratio bf16 / float32 is the goal (<= 0.4);
* ``kernel`` — PyTorch's fused CPU flash kernel alone on the band's tile shapes: n / b blocks of b
  queries against w keys with one shared additive mask, in float32 and bf16; GFLOP/s over the
  computed pairs and the bf16 / float32 time ratio per shape (what the kernel itself can give;
  each block has its own k and v window here, more memory traffic than the band's overlapping
  views, so compare shapes within a dtype with care: the route decides);
* ``accuracy`` — max |out - float64 reference| of the bf16 route and of SDPA in bf16 with the dense
  mask, on the same inputs at logit scales 1, 5 and 20 (q and k scaled), and their ratio;
* ``softmax_floor`` — the route in float32 and bf16 at head dims E = 16, 32 and 64 (the same
  pairs, GEMM work in proportion to E): a line through time against E, extrapolated to E = 0,
  is the call's cost that no GEMM speed can remove (the kernel's float32 softmax per pair, its
  masking, the Python around it). bf16 makes the GEMMs faster, not that part, so
  ``bf16_floor / fp32_time`` at E = 64 bounds the bf16 / float32 ratio any call of this kernel
  can reach; the GEMM rate of a 2048² matmul per dtype is recorded beside it, for scale
  (``--only floor`` adds it to the saved JSON, keeping its other parts);
* ``route_mmap_threshold_64k`` — the route again in a child process with glibc's
  ``MALLOC_MMAP_THRESHOLD_=65536 MALLOC_TRIM_THRESHOLD_=0``, the allocator settings
  benchmarks/flex_race.py runs its workers with (so RSS tracks live memory): every allocation over
  64 KiB is then a fresh mmap whose pages fault in on first touch, and the kernel's bf16 path
  allocates such buffers on every call.

B=1, H=8, E=64. The 1-minute load average is recorded before and after; the machine is shared,
so the minima of the timed calls (the least disturbed ones) are stored next to the medians.

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/bf16_window.py   # → benchmarks/results/bf16_window.json
    ... --out benchmarks/results/bf16_window_amd_epyc.json            # another machine's run, kept apart
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import attnkit
from attnkit import masks
from attnkit.backends.blockwise.kernel import band as fused_band

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: the shared helpers
from common import cpu_flags, record  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
B, H, E = 1, 8, 64
TARGET = 0.4  # bf16 time / float32 time on the route
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def interleaved(fns: dict, reps: int) -> dict[str, list[float]]:
    """Times (ms) of every function, one call of each per round after one warm-up round."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for f in fns.values():
        f()
    for _ in range(reps):
        for name, f in fns.items():
            t0 = time.perf_counter()
            f()
            times[name].append((time.perf_counter() - t0) * 1e3)
    return times


def route(n: int, window: int, reps: int, untuned: bool) -> dict:
    g = torch.Generator().manual_seed(0)
    base = [torch.randn(B, H, n, E, generator=g) for _ in range(3)]
    mask = masks.sliding_window(window - 1, 0)
    fns = {}
    for name, dt in DTYPES.items():
        q, k, v = (t.to(dt) for t in base)
        fns[name] = lambda q=q, k=k, v=v: attnkit.attention(q, k, v, mask=mask, backend="blockwise")
    tuned = fused_band.tuned
    if untuned:
        def plain(q, k, v):
            with _untuned():
                return attnkit.attention(q, k, v, mask=mask, backend="blockwise")
        for name, dt in DTYPES.items():
            q, k, v = (t.to(dt) for t in base)
            fns[name + "_untuned"] = lambda q=q, k=k, v=v: plain(q, k, v)
    with torch.no_grad():
        times = interleaved(fns, reps)
        path = attnkit.attention(*(t.bfloat16() for t in base), mask=mask, backend="blockwise").report.reason
    med = {name: statistics.median(t) for name, t in times.items()}
    band = fused_band.band_of(mask, n, n)
    row = {"n": n, "window": window, "median_ms": med, "min_ms": {name: min(t) for name, t in times.items()},
           "times_ms": times, "path_bf16": path,
           "band": {name: _geometry(tuned(band, dt)) for name, dt in DTYPES.items()},
           "bf16_over_fp32": med["bfloat16"] / med["float32"]}
    if untuned:
        row["band"]["untuned"] = _geometry(band)
        row["bf16_over_fp32_untuned"] = med["bfloat16_untuned"] / med["float32_untuned"]
        row["bf16_tuned_over_fp32_untuned"] = med["bfloat16"] / med["float32_untuned"]
    row["bf16_over_fp32_of_minima"] = row["min_ms"]["bfloat16"] / row["min_ms"]["float32"]  # least disturbed calls
    row["within_target"] = row["bf16_over_fp32"] <= TARGET
    print(f"route n={n} W={window}: " + ", ".join(f"{k} {v:.1f} ms" for k, v in med.items())
          + f"; bf16/fp32 = {row['bf16_over_fp32']:.3f}")
    return row


def _geometry(band) -> dict:
    return {"b": band.b, "w": band.w, "pad": band.pad}


class _untuned:
    """Within it the band runs as before per-dtype tuning: the same block size for every dtype, no padding."""

    def __enter__(self):
        self.old = fused_band.tuned
        fused_band.tuned = lambda band, dtype, finite_kv=True: band

    def __exit__(self, *exc):
        fused_band.tuned = self.old


def kernel(n: int, window: int, reps: int, blocks: list[int]) -> list[dict]:
    """The fused kernel on (n / b) blocks of b queries × w keys, w = b + window - 1 and the next multiple of 64."""
    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    g = torch.Generator().manual_seed(1)
    fns, shapes = {}, {}
    for b in blocks:
        for w in sorted({b + window - 1, -(-(b + window - 1) // 64) * 64}):
            nb = n // b
            allowed = torch.ones(b, w, dtype=torch.bool).tril(w - b).triu(w - b - window + 1)
            for name, dt in DTYPES.items():
                q = torch.randn(nb, H, b, E, generator=g).to(dt)
                k, v = (torch.randn(nb, H, w, E, generator=g).to(dt) for _ in range(2))
                add = torch.zeros(b, w, dtype=dt).masked_fill_(~allowed, float("-inf"))
                key = f"b{b}_w{w}_{name}"
                fns[key] = lambda q=q, k=k, v=v, add=add: op(q, k, v, attn_mask=add, scale=E ** -0.5)
                shapes[key] = (b, w, nb, name)
    times = interleaved(fns, reps)
    rows = []
    for key, (b, w, nb, name) in shapes.items():
        med = statistics.median(times[key])
        flops = 4.0 * nb * H * b * w * E
        rows.append({"b": b, "w": w, "blocks": nb, "dtype": name, "median_ms": med, "min_ms": min(times[key]),
                     "times_ms": times[key],
                     "gflops": flops / med / 1e6})
    for r in rows:
        if r["dtype"] == "bfloat16":
            fp = next(x for x in rows if x["dtype"] == "float32" and x["b"] == r["b"] and x["w"] == r["w"])
            r["bf16_over_fp32"] = r["median_ms"] / fp["median_ms"]
            print(f"kernel b={r['b']} w={r['w']}: fp32 {fp['median_ms']:.1f} ms ({fp['gflops']:.0f} GFLOP/s), "
                  f"bf16 {r['median_ms']:.1f} ms ({r['gflops']:.0f} GFLOP/s), ratio {r['bf16_over_fp32']:.2f}")
    return rows


def accuracy(n: int, window: int, scales: list[float]) -> list[dict]:
    """bf16 route and SDPA bf16 errors against float64 on the same (bf16-rounded) inputs."""
    g = torch.Generator().manual_seed(2)
    mask = masks.sliding_window(window - 1, 0)
    dense = mask.materialize(n, n)[0, 0]
    rows = []
    for s in scales:
        q, k, v = (torch.randn(B, H, n, E, generator=g) for _ in range(3))
        q, k = q * s ** 0.5, k * s ** 0.5  # logits q·k/sqrt(E) of standard deviation ~ s
        q, k, v = (t.bfloat16() for t in (q, k, v))
        with torch.no_grad():
            ref = torch.cat([F.scaled_dot_product_attention(q[:, h:h + 1].double(), k[:, h:h + 1].double(),
                                                            v[:, h:h + 1].double(), attn_mask=dense)
                             for h in range(H)], 1)  # one head at a time: (L, S) float64 scores, not (H, L, S)
            ours = attnkit.attention(q, k, v, mask=mask, backend="blockwise").out
            sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=dense)
        e_ours = (ours.double() - ref).abs().max().item()
        e_sdpa = (sdpa.double() - ref).abs().max().item()
        rows.append({"logit_std": s, "max_err_blockwise_bf16": e_ours, "max_err_sdpa_bf16": e_sdpa,
                     "ratio": e_ours / e_sdpa})
        print(f"accuracy logit std {s}: blockwise {e_ours:.2e}, sdpa {e_sdpa:.2e}, ratio {e_ours / e_sdpa:.2f}")
    return rows


def softmax_floor(n: int, window: int, reps: int, dims=(16, 32, 64)) -> dict:
    """Route time against head dim per dtype, interleaved; the least-squares line's value at E = 0."""
    g = torch.Generator().manual_seed(3)
    mask = masks.sliding_window(window - 1, 0)
    fns = {}
    for e in dims:
        base = [torch.randn(B, H, n, e, generator=g) for _ in range(3)]
        for name, dt in DTYPES.items():
            q, k, v = (t.to(dt) for t in base)
            fns[f"{name}_E{e}"] = lambda q=q, k=k, v=v: attnkit.attention(q, k, v, mask=mask, backend="blockwise")
    with torch.no_grad():
        times = interleaved(fns, reps)
    med = {key: statistics.median(t) for key, t in times.items()}
    row = {"n": n, "window": window, "dims": list(dims), "median_ms": med}
    for name in DTYPES:
        ys = [med[f"{name}_E{e}"] for e in dims]
        xm, ym = statistics.fmean(dims), statistics.fmean(ys)
        slope = sum((x - xm) * (y - ym) for x, y in zip(dims, ys)) / sum((x - xm) ** 2 for x in dims)
        row[f"{name}_ms_per_dim"] = slope
        row[f"{name}_floor_ms"] = ym - slope * xm
    for name, dt in DTYPES.items():  # the machine's GEMM rate on a large matmul, for scale
        a, b = (torch.randn(2048, 2048, generator=g).to(dt) for _ in range(2))
        t = interleaved({"mm": lambda a=a, b=b: a @ b}, 5)["mm"]
        row[f"{name}_matmul_2048_gflops"] = 2 * 2048 ** 3 / statistics.median(t) / 1e6
    fp32 = med[f"float32_E{dims[-1]}"]
    row["bf16_floor_over_fp32"] = row["bfloat16_floor_ms"] / fp32
    row["bf16_over_fp32"] = med[f"bfloat16_E{dims[-1]}"] / fp32
    print(f"softmax floor n={n}: fp32 E={dims[-1]} {fp32:.1f} ms; bf16 floor {row['bfloat16_floor_ms']:.1f} ms "
          f"= {row['bf16_floor_over_fp32']:.2f} of it (goal {TARGET}); bf16 at E={dims[-1]}: {row['bf16_over_fp32']:.2f}")
    return row


def _child_route(a) -> dict:
    """The route measured in a child process under flex_race.py's allocator settings."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "route.json"
        cmd = [sys.executable, __file__, "--only", "route", "--n", str(a.n), "--window", str(a.window),
               "--reps", str(a.reps), "--out", str(out)]
        subprocess.run(cmd, env=env, check=True)
        return {"env": {k: env[k] for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")},
                **json.loads(out.read_text())["route"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--blocks", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--no-untuned", action="store_true", help="skip the untuned band (the same-run baseline)")
    ap.add_argument("--only", choices=["route", "kernel", "accuracy", "floor"], default=None)
    ap.add_argument("--out", type=Path, default=RESULTS / "bf16_window.json")
    a = ap.parse_args()
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    res = {"what": __doc__.split("\n")[0], "torch": torch.__version__, "threads": torch.get_num_threads(),
           "B": B, "H": H, "E": E, "reps": a.reps, "target": TARGET, "cpu_count": os.cpu_count(), "cpu": cpu_flags(),
           "load_avg_before": list(load_before)}
    if a.only in (None, "route"):
        res["route"] = route(a.n, a.window, a.reps, not a.no_untuned)
    if a.only in (None, "kernel"):
        res["kernel"] = kernel(a.n, a.window, a.reps, a.blocks)
    if a.only in (None, "accuracy"):
        res["accuracy"] = accuracy(a.n, a.window, [1.0, 5.0, 20.0])
    if a.only in (None, "floor"):
        res["softmax_floor"] = softmax_floor(a.n, a.window, a.reps)
    if a.only is None:
        res["route_mmap_threshold_64k"] = _child_route(a)
    if a.only == "floor" and a.out.exists():  # one part re-measured: the file's other parts are kept
        res = {**json.loads(a.out.read_text()), "softmax_floor": res["softmax_floor"]}
    res["load_avg_after"] = list(os.getloadavg())
    a.out.parent.mkdir(parents=True, exist_ok=True)
    record(a.out, res)
    print(f"load {load_before} -> {os.getloadavg()}; wrote {a.out}")


if __name__ == "__main__":
    main()
