"""Two rows of the performance goals: biases at n = 8k, and small masked calls against SDPA.

**Biases at 8k** (``bias8k``): ALiBi, T5 buckets and a custom bias function (a per-head
log-distance penalty, which declares no structure), each unmasked and causal, float32, one thread,
B=1, H=8, E=64, forward. Each (case, implementation) runs in a fresh subprocess (time: one warm-up,
then the median of ``--reps`` calls; memory: the peak resident memory above what was live after the
warm-up, VmHWM - VmRSS, as ``flex_race.py`` measures it):

* ``blockwise`` — ``attnkit.attention(..., backend="blockwise")`` of this tree;
* ``blockwise_before`` — the same call on the code under ``--before-src`` (a checkout of the
  previous commit, e.g. ``git worktree add /tmp/pb_before HEAD``); skipped when not given. Each
  row records the path that ran (``path``): the custom bias declares no structure, and runs on the
  per-key-chunk bias route (``attnkit.backends.blockwise.routes.custom``) where the code has one;
* ``sdpa_dense_bias`` — ``F.scaled_dot_product_attention`` with the dense (1, H, L, S) float bias
  (the mask folded in as -inf), built once outside the timed calls and so not in its peak
  (``dense_bias_mib``: 2 GiB at 8k);
* ``flex`` — ``torch.compile(flex_attention)`` with the bias's own ``score_mod`` and a block mask
  (all-true, or causal), compiled and called once before the timed calls
  (``compile_and_first_call_s``); CPU FlexAttention is forward only;
* ``auto`` — ``attnkit.attention`` with backend ``auto``; the report's path is recorded.

Ratios (``speedup_vs_blockwise_before``, ``ratio_to_sdpa_dense_bias``, ``ratio_to_flex``) are between rows of the same run.

**Small masked calls** (``small``): n in {64, 128, 256, 512}, B in {1, 8}, H=8, E=64, float32, one
thread, masks causal, sliding window (64 keys back), key padding (a quarter of the keys of every
other sequence) and documents (four per sequence). ``auto`` (``attnkit.attention``, default backend)
against SDPA with the dense bool mask built once outside the timed call; the two are timed
interleaved, call by call, in one process, so load drift hits both alike; medians of ``--small-runs``
calls, and ``ratio = auto / sdpa`` (the goal: at most 1.2). Compiled FlexAttention with the same
mask as a block mask is timed in a second interleaved pass against ``auto`` in the same process
(``flex_us``, ``auto_us_beside_flex``, ``ratio_to_flex`` = their ratio); it compiles per case first
(``flex_compile_and_first_call_s``: dynamo's caches are reset per case, but inductor's on-disk cache
may serve a kernel compiled before). With ``--before-src`` the same rows are
measured on that code too (``code``: ``"this tree"`` / ``"before"``; the file's ``before_src``
names, per part, the code its ``before`` rows ran). These rows run with glibc's
default allocator settings (``malloc``: ``"default"``), not the bias rows' ``MALLOC_MMAP_THRESHOLD_``,
which turns every allocation over 64 KiB into a fresh mmap and its page faults.

With ``--malloc default`` the bias rows run with glibc's default allocator instead (the time a user
sees; the peaks then read what malloc kept, not what the call needed), saved apart to
``bias_and_small_default_malloc.json``.

Run:  PYTHONPATH=src python benchmarks/bias_and_small.py [--quick] [--part bias8k|small]
      [--only PATTERN] [--before-src /tmp/pb_before/src] [--reps 3] [--malloc default] [--tag NAME]
Saves benchmarks/results/bias_and_small.json (``_quick`` with ``--quick``, ``_TAG`` with ``--tag``: another machine's run) after every row; a run keeps
the rows of the other part. Each row records the 1-minute load average; the file records the CPU's flags.
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
from common import bias_8k, cpu_flags, interleaved_times, mask_8k, record, tag_suffix, time_and_peak  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
B, H, E = 1, 8, 64
N_BIAS, QUICK_N = 8192, 1024
BIASES = ("alibi", "t5", "custom")
MASKS_8K = ("none", "causal")
IMPLS_8K = ("blockwise", "blockwise_before", "sdpa_dense_bias", "flex", "auto")
SMALL_N = (64, 128, 256, 512)
SMALL_B = (1, 8)
SMALL_MASKS = ("causal", "window", "padding", "document")


def bias_worker(bias_kind: str, mask_kind: str, impl: str, n: int, reps: int) -> dict:
    import torch
    import torch.nn.functional as F

    import attnkit

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, n, E, generator=g) for _ in range(3))
    bias, mask = bias_8k(bias_kind), mask_8k(mask_kind)
    path = None
    extra = {}
    if impl == "sdpa_dense_bias":
        with torch.no_grad():
            dense = bias.materialize(n, n, heads=H).contiguous()  # (1, H, L, S) float32
            if mask is not None:
                dense.masked_fill_(~mask.materialize(n, n), float("-inf"))
        extra["dense_bias_mib"] = dense.numel() * dense.element_size() / 2**20

        def fn():
            return F.scaled_dot_product_attention(q, k, v, attn_mask=dense)
    elif impl == "flex":
        import time

        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        score_mod = bias.score_mod(n, n)  # the bias's own function, as FlexAttention's score_mod

        def allowed(b, h, qi, ki):
            return qi >= 0 if mask is None else ki <= qi

        block_mask = create_block_mask(allowed, None, None, n, n, device="cpu")
        compiled = torch.compile(flex_attention)
        t0 = time.perf_counter()
        with torch.no_grad():
            compiled(q, k, v, score_mod=score_mod, block_mask=block_mask)
        extra["compile_and_first_call_s"] = time.perf_counter() - t0

        def fn():
            return compiled(q, k, v, score_mod=score_mod, block_mask=block_mask)
    else:
        backend = "auto" if impl == "auto" else "blockwise"

        def fn():
            nonlocal path
            res = attnkit.attention(q, k, v, bias=bias, mask=mask, backend=backend)
            path = f"{res.report.backend}: {res.report.reason}"
            return res.out

    with torch.no_grad():
        first, times, peak, exact, _ = time_and_peak(fn, reps)
    return {"part": "bias8k", "case": f"{bias_kind}_{mask_kind}", "impl": impl, "n": n, "reps": reps,
            "median_ms": statistics.median(times) * 1e3, "times_ms": [t * 1e3 for t in times],
            "first_call_ms": first * 1e3, "peak_above_live_mib": peak / 1024, "peak_exact": exact, "path": path, **extra}


def _small_mask(kind: str, b: int, n: int):
    from attnkit import masks

    if kind == "causal":
        return masks.causal()
    if kind == "window":
        return masks.sliding_window(63, 0)
    if kind == "padding":
        return masks.padding_mask(_small_lengths(b, n), n)
    return masks.document(_small_docs(b, n))


def _small_lengths(b: int, n: int) -> list[int]:
    """Key lengths of the padding case: a quarter of the keys cut from every other sequence."""
    return [n - (n // 4) * (i % 2) for i in range(b)]


def _small_docs(b: int, n: int):
    """(b, n) document ids of the document case: four equal documents per sequence."""
    import torch

    return (torch.arange(n) * 4 // n).expand(b, n).contiguous()


def _small_flex(kind: str, b: int, n: int, q, k, v):
    """(compiled FlexAttention call, its first call's seconds incl. compiling, its output) of a small
    case: ``torch.compile(flex_attention)`` with the mask as a block mask of the same keys. Dynamo's
    caches are reset first, so every case compiles afresh (a reused function would hit the
    recompile limit and run eagerly) and its compile time is its own."""
    import time

    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    lens, docs = torch.tensor(_small_lengths(b, n)), _small_docs(b, n)  # the same masks as _small_mask's
    mods = {"causal": lambda bi, h, qi, ki: ki <= qi,
            "window": lambda bi, h, qi, ki: (ki <= qi) & (ki >= qi - 63),
            "padding": lambda bi, h, qi, ki: ki < lens[bi],
            "document": lambda bi, h, qi, ki: docs[bi, qi] == docs[bi, ki]}
    torch._dynamo.reset()
    t0 = time.perf_counter()
    block_mask = create_block_mask(mods[kind], b if kind in ("padding", "document") else None, None, n, n, device="cpu")
    compiled = torch.compile(flex_attention)
    with torch.no_grad():
        out = compiled(q, k, v, block_mask=block_mask)
    return (lambda: compiled(q, k, v, block_mask=block_mask)), time.perf_counter() - t0, out


def small_worker(runs: int, quick: bool, only: str | None = None, flex: bool = True) -> list[dict]:
    import torch
    import torch.nn.functional as F

    import attnkit

    torch.set_num_threads(1)
    rows = []
    for n in SMALL_N[:2] if quick else SMALL_N:
        for b in SMALL_B:
            g = torch.Generator().manual_seed(0)
            q, k, v = (torch.randn(b, H, n, E, generator=g) for _ in range(3))
            for kind in SMALL_MASKS:
                if only and only not in f"{kind}_n{n}_B{b}":
                    continue
                mask = _small_mask(kind, b, n)
                dense = mask.materialize(n, n, batch=b)  # (B|1, 1, L, S) bool, built once
                res = attnkit.attention(q, k, v, mask=mask)
                ref = F.scaled_dot_product_attention(q, k, v, attn_mask=dense)
                err = float((res.out - ref).abs().max())
                auto = lambda: attnkit.attention(q, k, v, mask=mask)  # noqa: E731
                with torch.no_grad():  # 10 untimed rounds first: caches, first-call paths
                    t = interleaved_times({"auto": auto, "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=dense)},
                                          runs, warmup=10)
                a, s = statistics.median(t["auto"]) * 1e6, statistics.median(t["sdpa"]) * 1e6
                extra = {}
                if flex:  # a second interleaved pass, auto against Flex (a third call in the first
                    # pass would change what the goal's two calls find in the caches)
                    fx, compile_s, flex_out = _small_flex(kind, b, n, q, k, v)
                    with torch.no_grad():
                        tf = interleaved_times({"auto": auto, "flex": fx}, runs, warmup=10)
                    extra = {"flex_us": statistics.median(tf["flex"]) * 1e6,
                             "auto_us_beside_flex": statistics.median(tf["auto"]) * 1e6,
                             "flex_compile_and_first_call_s": compile_s,
                             "flex_max_abs_diff_vs_sdpa": float((flex_out - ref).abs().max())}
                    extra["ratio_to_flex"] = extra["auto_us_beside_flex"] / extra["flex_us"]
                rows.append({"part": "small", "case": f"{kind}_n{n}_B{b}", "mask": kind, "n": n, "B": b,
                             "auto_us": a, "sdpa_dense_mask_us": s, "ratio": a / s, "runs": runs, **extra,
                             "auto_path": f"{res.report.backend}: {res.report.reason}",
                             "max_abs_diff_vs_sdpa": err, "loadavg_1min": os.getloadavg()[0],
                             "malloc": "default" if "MALLOC_MMAP_THRESHOLD_" not in os.environ else "mmap above 64 KiB"})
                print(json.dumps({k: (round(v, 2) if isinstance(v, float) else v) for k, v in rows[-1].items()
                                  if k != "auto_path"}), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"bias rows at n = {QUICK_N}, small rows at n = 64, 128")
    ap.add_argument("--part", choices=("bias8k", "small"), default=None, help="run one part only")
    ap.add_argument("--only", default=None, help="run only rows whose 'case:impl' (bias8k) or case (small, e.g. 'n64_B1') contains this")
    ap.add_argument("--before-src", default=None, help="src/ of the previous code, for blockwise_before")
    ap.add_argument("--malloc", choices=("mmap64k", "default"), default="mmap64k",
                    help="bias rows' allocator: mmap64k (MALLOC_MMAP_THRESHOLD_=65536, for the peak readings) or "
                         "glibc's default (time as users see it; saved apart, to bias_and_small_default_malloc.json)")
    ap.add_argument("--tag", default=None, help="save to bias_and_small_TAG.json (another machine's run)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--small-runs", type=int, default=300)
    ap.add_argument("--worker", nargs=4, metavar=("BIAS", "MASK", "IMPL", "N"), help=argparse.SUPPRESS)
    ap.add_argument("--small-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--no-flex", action="store_true", help=argparse.SUPPRESS)  # the --before-src small rows: Flex once is enough
    args = ap.parse_args()
    if args.worker:
        bias_kind, mask_kind, impl, n = args.worker
        print(json.dumps(bias_worker(bias_kind, mask_kind, impl, int(n), args.reps)))
        return
    if args.small_worker:
        print(json.dumps(small_worker(args.small_runs, args.quick, args.only, flex=not args.no_flex)))
        return
    import torch

    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "65536",
           "MALLOC_TRIM_THRESHOLD_": "0"}
    name = "bias_and_small_quick" if args.quick else "bias_and_small"
    if args.malloc == "default":
        if args.part != "bias8k":
            ap.error("--malloc default is for --part bias8k (the small rows always run with glibc's default)")
        env = {k: v for k, v in env.items() if not k.startswith("MALLOC_")}
        name += "_default_malloc"
    name += tag_suffix(ap, args.tag)
    src = str(Path(__file__).resolve().parents[1] / "src")
    path = RESULTS / f"{name}.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    rows = [r for r in old.get("rows", []) if "error" not in r]
    n = QUICK_N if args.quick else N_BIAS
    # the code each part's "before" rows ran, per part: a run of one part keeps the other's
    before = old.get("before_src") or {}
    before = {"bias8k": before, "small": before} if isinstance(before, str) else dict(before)
    for part in ("bias8k", "small"):
        if args.part in (None, part):
            before[part] = args.before_src

    def save():
        for case in {r["case"] for r in rows if r["part"] == "bias8k"}:
            base = {r["impl"]: r["median_ms"] for r in rows if r["case"] == case and "median_ms" in r}
            for r in rows:
                if r["case"] == case and "median_ms" in r:
                    if "blockwise_before" in base:
                        r["speedup_vs_blockwise_before"] = base["blockwise_before"] / r["median_ms"]
                    if "sdpa_dense_bias" in base:
                        r["ratio_to_sdpa_dense_bias"] = r["median_ms"] / base["sdpa_dense_bias"]
                    if "flex" in base:
                        r["ratio_to_flex"] = r["median_ms"] / base["flex"]
        out = {"what": __doc__.splitlines()[0], "torch": torch.__version__, "threads": 1, "quick": args.quick,
               "B": B, "H": H, "E": E, "n_bias": n, "before_src": before, "cpu": cpu_flags(),
               "reps": args.reps, "small_runs": args.small_runs, "bias_malloc": args.malloc, "loadavg_at_save": os.getloadavg()[0], "rows": rows}
        record(path, out)

    if args.part in (None, "bias8k"):
        for bias_kind in BIASES:
            for mask_kind in MASKS_8K:
                for impl in IMPLS_8K:
                    case = f"{bias_kind}_{mask_kind}"
                    if args.only and args.only not in f"{case}:{impl}":
                        continue
                    if impl == "blockwise_before" and not args.before_src:
                        continue
                    run_env = dict(env, PYTHONPATH=(args.before_src if impl == "blockwise_before" else src))
                    cmd = [sys.executable, __file__, "--worker", bias_kind, mask_kind, impl, str(n), "--reps", str(args.reps)]
                    p = subprocess.run(cmd, capture_output=True, text=True, env=run_env)
                    if p.returncode != 0:
                        row = {"part": "bias8k", "case": case, "impl": impl, "error": p.stderr.strip().splitlines()[-1:] or ["failed"]}
                    else:
                        row = json.loads(p.stdout.strip().splitlines()[-1])
                    row["loadavg_1min"] = os.getloadavg()[0]
                    rows[:] = [r for r in rows if not (r["part"] == "bias8k" and r["case"] == case and r["impl"] == impl)] + [row]
                    save()
                    print(json.dumps({k: (round(v, 1) if isinstance(v, float) else v) for k, v in row.items()
                                      if k not in ("times_ms", "path")}), flush=True)
    if args.part in (None, "small"):
        # a filtered run replaces only the rows it measures
        rows[:] = [r for r in rows if r["part"] != "small" or (args.only and args.only not in r["case"])]
        for code, code_src in (("this tree", src), ("before", args.before_src)):
            if code_src is None:
                continue
            cmd = [sys.executable, __file__, "--small-worker", "--small-runs", str(args.small_runs)] + (["--quick"] if args.quick else [])
            cmd += ["--only", args.only] if args.only else []
            cmd += ["--no-flex"] if code == "before" else []
            # glibc's default allocator here: the bias rows' MALLOC_* settings (for their peak-memory
            # reading) make every allocation over 64 KiB a fresh mmap, a cost per call no user pays
            small_env = {k: v for k, v in env.items() if not k.startswith("MALLOC_")}
            p = subprocess.run(cmd, capture_output=True, text=True, env=dict(small_env, PYTHONPATH=code_src))
            if p.returncode != 0:
                raise SystemExit(p.stderr)
            rows.extend(dict(r, code=code) for r in json.loads(p.stdout.strip().splitlines()[-1]))
            save()
    print("saved", path)


if __name__ == "__main__":
    main()
