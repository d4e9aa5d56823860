"""Benchmark suite for the attention backends: time (median of runs), peak memory measured in a fresh
subprocess, and achieved GFLOP/s against a GEMM peak measured in the same run.

Every measurement runs in its own Python subprocess (``python -m attnkit.bench --worker SPEC``):
it builds its inputs, records the resident-set high-water mark (``ru_maxrss``), makes one call
(whose peak above the inputs is the memory figure: measured, not estimated), then times
``runs`` more calls and reports their median. The ``sdpa`` baseline is what a user would write:
``F.scaled_dot_product_attention`` given the dense bool mask / float bias they would have to build,
with the build inside the timed region (``is_causal=True`` for causal, nothing for no mask).

Suites: ``quick`` (≤ 60 s, used by ``attnkit report``), ``must`` (the issue's headline
comparisons, ~7 min on 2 cores), ``full`` (the whole sweep n ∈ {1k, 4k, 16k} × masks × biases
× fp32/bf16 × backends; ~50 min on 2 cores; configurations whose dense tensors cannot fit are
skipped with the reason recorded).

Shape: B = 1, H = 8, E = Ev = 64, L = S = n.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from .provenance import provenance
from .suites import B, BACKENDS, BIASES, E, H, MASKS, WINDOW, _skip_reason, suite_specs  # noqa: F401

# runs land here unless --out names another folder; benchmarks/results/ holds the committed numbers
DEFAULT_OUT = "runs/bench"


# the work of one measurement (runs inside the worker subprocess) ----------------------------------
def _doc_ids(n: int) -> torch.Tensor:
    """Packed documents of uneven lengths (about n/8 each), deterministic."""
    g = torch.Generator().manual_seed(0)
    lengths = []
    while sum(lengths) < n:
        lengths.append(int(torch.randint(n // 16, n // 5 + 1, (1,), generator=g)))
    lengths[-1] -= sum(lengths) - n
    return torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))


def _attnkit_objects(mask: str, bias: str, n: int):
    import attnkit

    M, Bi = attnkit.masks, attnkit.biases
    m = {"none": None, "causal": M.causal(), "sliding256": M.sliding_window(WINDOW - 1, 0), "document": M.document(_doc_ids(n))}[mask]
    torch.manual_seed(0)
    b = {"none": None, "alibi": Bi.ALiBi(H), "t5": Bi.T5RelativeBias(H, bidirectional=mask != "causal")}[bias]
    if b is not None:
        b.requires_grad_(False)
    return m, b


def _user_sdpa(q, k, v, mask: str, bias: str, bias_mod):
    """What a user writes for SDPA: build the dense mask/bias (timed), then one fused call."""
    import torch.nn.functional as F

    n = q.shape[2]
    if bias == "none" and mask in ("none", "causal"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=mask == "causal")
    i = torch.arange(n)
    allowed = None
    if mask == "causal":
        allowed = i[None, :] <= i[:, None]
    elif mask == "sliding256":
        allowed = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - WINDOW)
    elif mask == "document":
        ids = _doc_ids(n)
        allowed = ids[:, None] == ids[None, :]
    if bias == "none":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    from attnkit.core.biases import alibi_slopes, t5_bucket

    rel = i[None, :] - i[:, None]  # key − query
    if bias == "alibi":
        dense = -alibi_slopes(H).to(q.dtype)[:, None, None] * rel.abs().to(q.dtype)  # (H, L, S)
    else:
        bucket = t5_bucket(rel, bidirectional=bias_mod.bidirectional, num_buckets=bias_mod.num_buckets, max_distance=bias_mod.max_distance)
        dense = bias_mod.table.detach().to(q.dtype)[bucket].permute(2, 0, 1)  # (H, L, S)
    dense = dense.unsqueeze(0)  # (1, H, L, S): 4-D, or CPU SDPA drops to its math path
    if allowed is not None:
        dense = dense.masked_fill(~allowed, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=dense)


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024  # reported in kB
    raise RuntimeError(f"{field} not in /proc/self/status")


def reset_peak_rss() -> int:
    """Return free heap to the OS, reset the resident high-water mark, return the current RSS.

    ``ru_maxrss`` never goes down, so the peak of torch's import would hide everything smaller;
    writing 5 to ``/proc/self/clear_refs`` resets ``VmHWM`` (Linux ≥ 4.0) so the next reading is
    the peak of this call alone."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _status_bytes("VmRSS")
    except OSError:  # not Linux: fall back to the (coarser) lifetime maximum
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def peak_rss() -> int:
    """This process's resident high-water mark in bytes (``VmHWM``; ``ru_maxrss`` where /proc is absent)."""
    try:
        return _status_bytes("VmHWM")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def worker(spec: dict) -> dict:
    """One measurement in this (fresh) process. Returns times, peak memory and the chosen backend."""
    import attnkit  # noqa: F401  (registers the backends in this fresh worker process)

    torch.set_num_threads(int(spec.get("threads") or torch.get_num_threads()))
    n, dtype = spec["n"], getattr(torch, spec["dtype"])
    mask, bias, backend, mode = spec["mask"], spec["bias"], spec["backend"], spec.get("mode", "fwd")
    grad = mode == "fwdbwd"
    # warm up every code path on a tiny problem first, so lazily loaded kernels don't count as memory
    tiny = [torch.randn(B, H, 64, E, dtype=dtype).requires_grad_(grad) for _ in range(3)]
    _call(tiny, mask, bias, backend, grad, 64)
    g = torch.Generator().manual_seed(0)
    # drawn directly in the target dtype: no freed fp32 temporaries below the memory baseline
    q, k, v = (torch.randn(B, H, n, E, generator=g, dtype=dtype).requires_grad_(grad) for _ in range(3))
    dout = torch.randn(B, H, n, E, generator=g, dtype=dtype) if grad else None
    base = reset_peak_rss()
    t0 = time.perf_counter()
    chosen = _call([q, k, v], mask, bias, backend, grad, n, dout)
    first = time.perf_counter() - t0
    peak = peak_rss() - base
    times, pair_times = [], []
    budget_s = spec.get("max_seconds", 120.0)
    pair = spec.get("pair")  # time another backend interleaved with this one: load drift cancels
    if pair:
        _call([q, k, v], mask, bias, pair, grad, n, dout)
    for _ in range(spec["runs"]):
        if sum(times) + sum(pair_times) + first > budget_s and len(times) >= 3:
            break  # keep long configurations bounded; the count of runs is recorded
        t0 = time.perf_counter()
        _call([q, k, v], mask, bias, backend, grad, n, dout)
        times.append(time.perf_counter() - t0)
        if pair:
            t0 = time.perf_counter()
            _call([q, k, v], mask, bias, pair, grad, n, dout)
            pair_times.append(time.perf_counter() - t0)
    extra = {"pair_median_ms": statistics.median(pair_times) * 1e3, "pair_times_ms": [t * 1e3 for t in pair_times]} if pair else {}
    return {
        **extra,
        **spec,
        "median_ms": statistics.median(times) * 1e3,
        "min_ms": min(times) * 1e3,
        "times_ms": [t * 1e3 for t in times],
        "first_ms": first * 1e3,
        "peak_mib": peak / 2**20,
        "inputs_mib": 3 * q.numel() * q.element_size() / 2**20,
        "chosen": chosen,
        "torch_threads": torch.get_num_threads(),
    }


def _call(qkv, mask, bias, backend, grad, n, dout=None):
    import attnkit

    q, k, v = qkv
    if q.grad is not None:
        q.grad = k.grad = v.grad = None
    m, b = _attnkit_objects(mask, bias, n)
    chosen = backend
    if backend == "sdpa":
        out = _user_sdpa(q, k, v, mask, bias, b)
    else:
        res = attnkit.attention(q, k, v, mask=m, bias=b, backend=backend)
        out, chosen = res.out, res.report.backend
    if grad:
        out.backward(dout if dout is not None else torch.ones_like(out))
    return chosen


# the driver ---------------------------------------------------------------------------------------
def _spawn(spec: dict, timeout: float) -> dict:
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    try:
        p = subprocess.run(
            [sys.executable, "-m", "attnkit.bench", "--worker", json.dumps(spec)],
            capture_output=True, text=True, timeout=timeout, env=env,
        )
    except subprocess.TimeoutExpired:
        return {**spec, "error": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        return {**spec, "error": (p.stderr.strip().splitlines() or ["worker failed"])[-1][:300]}
    return json.loads(lines[-1])


def gemm_peak(dtype: torch.dtype, n: int = 2048, runs: int = 5) -> float:
    """Median GFLOP/s of an n × n × n matmul in this process (the roofline the backends are held to)."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    a @ b
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        a @ b
        ts.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(ts) / 1e9


def attended_pairs(mask: str, n: int) -> int:
    if mask == "none":
        return n * n
    if mask == "causal":
        return n * (n + 1) // 2
    if mask == "sliding256":
        w = min(WINDOW, n)
        return w * (w + 1) // 2 + (n - w) * w
    if mask == "document":
        return int((torch.bincount(_doc_ids(n)).double() ** 2).sum())
    raise ValueError(mask)


def summarize(rows: list[dict]) -> dict:
    """The issue's headline checks, computed from rows of one run."""
    def get(tag, be, **kw):
        for r in rows:
            if r.get("tag") == tag and r["backend"] == be and "error" not in r and "skipped" not in r and all(r[k] == v for k, v in kw.items()):
                return r
        return None

    s: dict = {}

    def ratio(tag, **kw):
        sd, bw = get(tag, "sdpa", **kw), get(tag, "blockwise", **kw)
        if sd and bw:
            return {
                "sdpa_ms": sd["median_ms"], "blockwise_ms": bw["median_ms"], "speedup": sd["median_ms"] / bw["median_ms"],
                "sdpa_peak_mib": sd["peak_mib"], "blockwise_peak_mib": bw["peak_mib"],
                "memory_ratio": bw["peak_mib"] / max(sd["peak_mib"], 1e-9),
            }
        return None

    s["window256_16k_fp32"] = ratio("window16k")
    s["alibi_8k_fp32"] = ratio("bias8k", bias="alibi")
    s["t5_8k_fp32"] = ratio("bias8k", bias="t5")
    s["bf16_dense_4k"] = ratio("bf16dense4k")
    av = []
    for r in rows:
        if r.get("tag") in ("auto_vs_sdpa", "window16k", "bias8k", "bf16dense4k") and r["backend"] == "auto" and "median_ms" in r:
            sd_ms = r.get("pair_median_ms")
            if sd_ms is None:
                sd = get(r["tag"], "sdpa", n=r["n"], mask=r["mask"], bias=r["bias"], dtype=r["dtype"])
                sd_ms = sd["median_ms"] if sd else None
            if sd_ms:
                av.append({"n": r["n"], "mask": r["mask"], "bias": r["bias"], "dtype": r["dtype"], "chosen": r["chosen"],
                           "auto_ms": r["median_ms"], "sdpa_ms": sd_ms, "auto_over_sdpa": r["median_ms"] / sd_ms,
                           "interleaved": "pair_median_ms" in r})
    s["auto_vs_sdpa"] = av
    s["train_window_peak_mib"] = {
        be: {r["n"]: r["peak_mib"] for r in rows if r.get("tag") == "train_window" and r["backend"] == be and "peak_mib" in r}
        for be in ("blockwise", "sdpa")
    }
    cross = {}
    for r in rows:
        if r.get("tag") == "linear_crossover" and r["backend"] == "linear" and "median_ms" in r:
            sd = get("linear_crossover", "sdpa", n=r["n"])
            if sd:
                cross[r["n"]] = {"linear_ms": r["median_ms"], "sdpa_causal_ms": sd["median_ms"]}
    s["linear_vs_sdpa_causal"] = cross
    faster = sorted(n for n, c in cross.items() if c["linear_ms"] < c["sdpa_causal_ms"])
    s["linear_faster_from_n"] = faster[0] if faster else None
    return s


def auto_choices(rows: list[dict]) -> dict:
    """How well ``auto`` chose: per configuration, the forced-backend time of the backend it chose
    over the fastest exact backend measured (reference, sdpa, blockwise). Uses the forced rows, not
    the auto row's own time, so process-to-process noise between runs does not blur the choice."""
    groups: dict = {}
    for r in rows:
        if "median_ms" in r:
            groups.setdefault((r["n"], r["dtype"], r["mask"], r["bias"], r["mode"]), {})[r["backend"]] = r
    out = []
    for (n, dtype, mask, bias, mode), m in sorted(groups.items()):
        exact = {b: m[b]["median_ms"] for b in ("reference", "sdpa", "blockwise") if b in m}
        chosen = m.get("auto", {}).get("chosen")
        if chosen in exact:
            best = min(exact, key=exact.get)
            out.append({"n": n, "dtype": dtype, "mask": mask, "bias": bias, "chosen": chosen, "fastest": best,
                        "chosen_over_fastest": exact[chosen] / exact[best]})
    return {
        "configs": len(out),
        "chose_fastest": sum(c["chosen"] == c["fastest"] for c in out),
        "within_1_10": sum(c["chosen_over_fastest"] <= 1.10 for c in out),
        "misses": [c for c in out if c["chosen"] != c["fastest"]],
    }


def run_bench(quick: bool = False, out_dir: str | os.PathLike = DEFAULT_OUT, *, suite: str | None = None,
              timeout: float = 900.0, log=print) -> dict:
    """Run a suite (``quick`` → the ≤ 60 s smoke suite, else ``suite`` or ``"must"``); write
    ``attention[_<suite>].json`` and ``.png`` under ``out_dir`` (default ``runs/bench/``: the committed
    ``benchmarks/results/`` change only when asked for by name), log each path written; return the
    results dict, whose ``"files"`` lists those paths."""
    suite = "quick" if quick else (suite or "must")
    specs = suite_specs(suite)
    t_start = time.perf_counter()
    peaks = {dt: gemm_peak(getattr(torch, dt)) for dt in sorted({s["dtype"] for s in specs})}
    log("GEMM peak (GFLOP/s): " + ", ".join(f"{k} {v:.0f}" for k, v in peaks.items()))
    rows = []
    for spec in specs:
        why = _skip_reason(spec)
        if why:
            rows.append({**spec, "skipped": why})
            continue
        r = _spawn(spec, timeout)
        if "median_ms" in r:
            flops = 4 * B * H * E * attended_pairs(spec["mask"], spec["n"]) * (3.5 if spec["mode"] == "fwdbwd" else 1.0)
            # softmax-attention flops per second; for linear attention an "equivalent" rate only
            r["gflops"] = flops / (r["median_ms"] / 1e3) / 1e9
            r["fraction_of_gemm_peak"] = r["gflops"] / peaks[spec["dtype"]]
            r["gflops_is_equivalent"] = spec["backend"] == "linear"
            log(f"{spec['tag']:>16} n={spec['n']:>5} {spec['dtype']:>8} {spec['mask']:>10} {spec['bias']:>5} {spec['mode']:>6} "
                f"{spec['backend']:>9}→{r['chosen']:<9} {r['median_ms']:9.1f} ms  peak {r['peak_mib']:8.1f} MiB  {r['gflops']:6.1f} GFLOP/s")
        else:
            log(f"{spec['tag']:>16} n={spec['n']} {spec['mask']} {spec['bias']} {spec['backend']}: {r.get('error')}")
        rows.append(r)
    result = {
        "provenance": provenance(script="attnkit bench"),
        "suite": suite,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch": torch.__version__,
                    "threads": torch.get_num_threads(), "load_avg_at_end": os.getloadavg()},
        "shape": {"B": B, "H": H, "E": E, "window": WINDOW},
        "gemm_peak_gflops": peaks,
        "wall_s": time.perf_counter() - t_start,
        "rows": rows,
        "summary": summarize(rows),
        "auto_choices": auto_choices(rows),
    }
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = "attention" if suite == "must" else f"attention_{suite}"
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1, default=str))
    files = [out / f"{stem}.json"]
    try:
        from .plot import plot

        plot(result, out / f"{stem}.png")
        files.append(out / f"{stem}.png")
    except ImportError:  # matplotlib is the viz extra
        log("matplotlib not installed: no plot written")
    for f in files:
        log(f"wrote {f}")
    result["files"] = [str(f) for f in files]
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m attnkit.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the ≤ 60 s smoke suite")
    p.add_argument("--suite", choices=("quick", "must", "full"), default=None, help="quick, must (the default) or full")
    p.add_argument("--out", default=DEFAULT_OUT, help="output folder (default: runs/bench/; give benchmarks/results to update the committed files)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        print(json.dumps(worker(json.loads(a.worker))))
        return 0
    run_bench(a.quick, a.out, suite=a.suite)
    return 0


if __name__ == "__main__":
    sys.exit(main())
