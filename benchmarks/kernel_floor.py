"""How far each fused route sits above PyTorch's kernel, and the floor a speed goal meets there.

A route of the blockwise backend hands its work to PyTorch's fused CPU flash kernel
(``aten._scaled_dot_product_flash_attention_for_cpu``) in several calls and does the rest in
Python (masks, bias slabs, log-sum-exp merges). This script records those kernel calls for one
attention call (a ``TorchDispatchMode`` sees each: sizes, strides, dtypes, mask layout) and times
them alone:

* ``route_ms`` — the attention call itself (``attnkit.attention``), median of ``--reps``;
* ``kernel_ms`` — the same kernel calls with nothing of attnkit around them: each distinct call
  (same sizes, strides, offsets, dtypes) is replayed on inputs of its layout, the median of
  ``--reps`` times its count. The replay's inputs stay in cache between repeats, so this is a lower
  bound on what the route's kernel calls cost inside it;
* ``gemm_ms`` — the FLOPs of the two products any exact method computes for those pairs (q kᵀ and
  P v) over this CPU's matmul rate in the call's dtype on one 2048³ product (``peak_gflops``,
  measured in the same run): the floor of any method that computes these pairs with this CPU's
  GEMM, with nothing else (softmax, bias, merges) costing anything;
* ``bias_fn_ms`` (custom bias) — the time spent inside the user's bias function during the routed
  calls (a timer wraps the function; the route evaluates it once per query block and key chunk);
* ``before_ms`` (``--before-src``) — the same call on the code of the goals' day, in a fresh
  process (``bias_and_small.py``'s worker, glibc's default allocator), the goal's baseline;
* ``flex_ms`` (window) — compiled FlexAttention with the window as a block mask, after its compile.

Each case then states its goal and the floor against it:

* ``window256_16k`` (goal: ≥ 1.8× faster than compiled Flex): ``flex_ms / kernel_ms`` is the best
  ratio a route making these calls could show;
* ``window256_4k`` in bfloat16 and float32 (goal: bf16 ≤ 0.4 of the float32 time): the kernel's
  own ratio, and the matmul rates' ratio (torch's bf16 matmul rounds its result to bf16, which the
  goal's float32 scores would not allow: a floor, not a route);
* ``custom_8k`` / ``alibi_8k``, no mask and causal (goal: ≥ 1.5× the goals' day blockwise):
  ``before_ms / 1.5`` against ``kernel_ms + bias_fn_ms`` (the kernel's rate) and
  ``gemm_ms + bias_fn_ms`` (the GEMM's rate).

One thread, B=1, H=8, E=64, forward, float32 unless said. Run:

    PYTHONPATH=src python benchmarks/kernel_floor.py [--before-src /tmp/pb_issue/src] [--tag NAME]
        [--only CASE] [--reps 5] [--quick]

Saves benchmarks/results/kernel_floor.json (``_TAG`` with ``--tag``: another machine's run;
``_quick`` with ``--quick``, n / 8) after every case, keeping the other cases' rows, with the CPU's
flags.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: the shared helpers
from common import bias_8k, cpu_flags, mask_8k, race_call, record, tag_suffix, time_calls  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parents[1]
B, H, E = 1, 8, 64
KERNEL = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
# case -> (what it is, n, dtype, goal)
CASES = {
    "window256_16k": ("sliding window 256, auto, vs compiled Flex", 16384, "float32", "≥ 1.8× faster than compiled Flex"),
    "window256_4k_fp32": ("sliding window 256, forced blockwise", 4096, "float32", "(the bf16 row's baseline)"),
    "window256_4k_bf16": ("sliding window 256, forced blockwise, bfloat16", 4096, "bfloat16", "≤ 0.4 of the float32 time"),
    "alibi_8k_none": ("ALiBi, no mask, auto", 8192, "float32", "≥ 1.5× the goals' day blockwise"),
    "alibi_8k_causal": ("ALiBi, causal, auto", 8192, "float32", "≥ 1.5× the goals' day blockwise"),
    "custom_8k_none": ("custom log-distance bias, no mask, auto", 8192, "float32", "≥ 1.5× the goals' day blockwise"),
    "custom_8k_causal": ("custom log-distance bias, causal, auto", 8192, "float32", "≥ 1.5× the goals' day blockwise"),
}


# recording and replaying the kernel's calls ------------------------------------------------------
def _layout(t: torch.Tensor) -> tuple:
    """What a replay needs to rebuild ``t``'s view: sizes, strides, offset, storage length, dtype."""
    return ("tensor", tuple(t.shape), tuple(t.stride()), t.storage_offset(),
            t.untyped_storage().nbytes() // t.element_size(), str(t.dtype).removeprefix("torch."))


class KernelCalls(TorchDispatchMode):
    """Counts the fused kernel's calls made inside the ``with`` block, by their arguments' layouts."""

    def __init__(self):
        super().__init__()
        self.calls: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.overloadpacket is KERNEL:
            desc = tuple(_layout(a) if isinstance(a, torch.Tensor) else a for a in args)
            kw = tuple(sorted((k, _layout(v) if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()))
            self.calls[(desc, kw)] += 1
        return func(*args, **kwargs)


def _rebuild(desc, gen: torch.Generator, mask: bool = False) -> object:
    if not (isinstance(desc, tuple) and desc and desc[0] == "tensor"):
        return desc
    _, size, stride, offset, numel, dtype = desc
    base = torch.randn(numel, generator=gen)
    if mask:  # a float mask of bias-sized values (a log-distance or ALiBi slab: a few units), finite
        base = base.clamp(-4, 4)
    return base.to(getattr(torch, dtype)).as_strided(size, stride, offset)


def _median_ms(fn, reps: int) -> float:
    fn()  # warm-up: first-call paths, caches
    return statistics.median(time_calls(fn, reps, "cpu"))


def replay(calls: Counter, reps: int) -> dict:
    """``kernel_ms`` of the recorded calls (each distinct call timed alone, times its count), with
    the calls' count and the FLOPs of their two products (q kᵀ and P v)."""
    gen = torch.Generator().manual_seed(0)
    kernel = flops = 0.0
    for (desc, kw), count in calls.items():
        args = [_rebuild(d, gen) for d in desc]
        kwargs = {k: _rebuild(v, gen, mask=k == "attn_mask") for k, v in kw}
        kernel += count * _median_ms(lambda: KERNEL(*args, **kwargs), reps)
        q, k, v = args[:3]
        flops += count * 2 * q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2] * (q.shape[3] + v.shape[3])
    return {"kernel_ms": kernel, "kernel_calls": sum(calls.values()), "distinct_calls": len(calls), "gemm_gflop": flops / 1e9}


def peak_gflops(dtype: torch.dtype, n: int = 2048, reps: int = 5) -> float:
    """This CPU's matmul rate in ``dtype`` on one large square product (n x n x n): the best case
    any method's GEMMs reach, so FLOPs over it bound their time from below."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    return 2 * n ** 3 / _median_ms(lambda: a @ b, reps) / 1e6


# the cases ---------------------------------------------------------------------------------------
class _TimedFn:
    """A bias function with a stopwatch: the seconds spent inside it."""

    def __init__(self, fn):
        self.fn, self.seconds = fn, 0.0

    def __call__(self, *args):
        t0 = time.perf_counter()
        try:
            return self.fn(*args)
        finally:
            self.seconds += time.perf_counter() - t0


def _call(case: str, n: int, dtype: torch.dtype, wrap):
    """(fn() -> the call's result, q, k, v) of a case, as ``flex_race.py`` (window) and
    ``bias_and_small.py`` (biases) make it; ``wrap`` goes to the custom bias's function."""
    import attnkit

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, n, E, generator=g).to(dtype) for _ in range(3))
    if case.startswith("window"):
        fn, _ = race_call("window", n, n, dtype, "attnkit_auto" if case == "window256_16k" else "blockwise_fused")
        return (lambda: fn(q, k, v)), q, k, v
    kind, mask_kind = case.split("_8k_")
    bias, mask = bias_8k(kind, wrap), mask_8k(mask_kind)
    return (lambda: attnkit.attention(q, k, v, mask=mask, bias=bias)), q, k, v


def _flex_ms(n: int, q, k, v, reps: int) -> tuple[float, float]:
    """(median ms, compile-and-first-call s) of compiled Flex with the window as a block mask."""
    compiled, _ = race_call("window", n, n, q.dtype, "flex")
    t0 = time.perf_counter()
    compiled(q, k, v)
    first = time.perf_counter() - t0
    return _median_ms(lambda: compiled(q, k, v), reps), first


def _before_ms(case: str, before_src: str, reps: int, n: int) -> float | None:
    """The goals' day code on a bias case, in a fresh process with glibc's default allocator."""
    bias, mask = case.split("_8k_") if "_8k_" in case else (None, None)
    if bias is None:
        return None
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=before_src)
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bias_and_small.py"), "--worker", bias, mask,
           "blockwise_before", str(n), "--reps", str(reps)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"the --before-src run of {case} failed: {p.stderr.strip()[-400:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])["median_ms"]


def measure(case: str, reps: int, quick: bool, before_src: str | None) -> dict:
    what, n, dtype, goal = CASES[case]
    n = n // 8 if quick else n
    timers: list[_TimedFn] = []

    def wrap(f):
        timers.append(_TimedFn(f))
        return timers[-1]

    fn, q, k, v = _call(case, n, getattr(torch, dtype), wrap)
    with torch.no_grad():
        res = fn()  # first call: caches, route plans
        rec = KernelCalls()
        with rec:
            fn()
        for t in timers:
            t.seconds = 0.0
        route = _median_ms(fn, reps)
        bias_fn_ms = sum(t.seconds for t in timers) * 1e3 / (reps + 1)  # reps timed calls and the warm-up
        row = {"case": case, "what": what, "n": n, "dtype": dtype, "goal": goal, "reps": reps,
               "route_ms": route, "path": f"{res.report.backend}: {res.report.reason}",
               "bias_fn_ms": bias_fn_ms, **replay(rec.calls, reps)}
        row["peak_gflops"] = peak_gflops(getattr(torch, dtype))
        row["gemm_ms"] = row["gemm_gflop"] / row["peak_gflops"] * 1e3
        if case == "window256_16k":
            row["flex_ms"], row["flex_compile_and_first_call_s"] = _flex_ms(n, q, k, v, reps)
    if before_src:
        row["before_ms"] = _before_ms(case, before_src, reps, n)
    return row


def verdicts(rows: dict) -> dict:
    """Each goal against the floor its case measured (only the cases present)."""
    out = {}
    w = rows.get("window256_16k")
    if w and "flex_ms" in w:
        v = out["window256_16k"] = {"goal": 1.8, "route_ratio": w["flex_ms"] / w["route_ms"],
                                    "kernel_floor_ratio": w["flex_ms"] / w["kernel_ms"],
                                    "gemm_floor_ratio": w["flex_ms"] / w["gemm_ms"]}
        v["reachable_at_kernel_rate"] = v["kernel_floor_ratio"] >= v["goal"]  # a speed-up: at least the goal
    f32, b16 = rows.get("window256_4k_fp32"), rows.get("window256_4k_bf16")
    if f32 and b16:
        v = out["window256_4k_bf16"] = {"goal": 0.4, "route_ratio": b16["route_ms"] / f32["route_ms"],
                                        "kernel_floor_ratio": b16["kernel_ms"] / f32["kernel_ms"],
                                        "gemm_floor_ratio": b16["gemm_ms"] / f32["gemm_ms"]}
        v["reachable_at_kernel_rate"] = v["kernel_floor_ratio"] <= v["goal"]  # a time ratio: at most the goal
    for case, r in rows.items():
        if "_8k_" in case and r.get("before_ms"):
            target = r["before_ms"] / 1.5
            kernel_floor = r["kernel_ms"] + r["bias_fn_ms"]
            out[case] = {"goal": 1.5, "target_ms": target, "route_speedup": r["before_ms"] / r["route_ms"],
                         "kernel_floor_ms": kernel_floor, "kernel_floor_speedup": r["before_ms"] / kernel_floor,
                         "gemm_floor_speedup": r["before_ms"] / (r["gemm_ms"] + r["bias_fn_ms"]),
                         "reachable_at_kernel_rate": r["before_ms"] / kernel_floor >= 1.5}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="run only cases whose name contains this")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="n / 8 (a smoke run)")
    ap.add_argument("--before-src", default=None, help="src/ of the goals' day code, for before_ms of the bias cases")
    ap.add_argument("--tag", default=None, help="save to kernel_floor_TAG.json (another machine's run)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    name = "kernel_floor" + ("_quick" if args.quick else "") + tag_suffix(ap, args.tag)
    path = RESULTS / f"{name}.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    rows = dict(old.get("rows", {}))
    for case in CASES:
        if args.only and args.only not in case:
            continue
        rows[case] = measure(case, args.reps, args.quick, args.before_src)
        out = {"what": __doc__.splitlines()[0], "torch": torch.__version__, "threads": 1, "quick": args.quick,
               "B": B, "H": H, "E": E, "cpu": cpu_flags(),
               "before_src": args.before_src or old.get("before_src"), "loadavg_at_save": os.getloadavg()[0],
               "rows": rows, "verdicts": verdicts(rows)}
        record(path, out)
        print(json.dumps({k: (round(v, 1) if isinstance(v, float) else v) for k, v in rows[case].items() if k != "path"}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
