"""Differential fuzz of ``attnkit.attention`` against an independent float64 oracle.

    python benchmarks/fuzz_attention.py --cases 10000 --seed 0 --out benchmarks/results/fuzz.json

Each case (``tests/fuzz/_fuzz_cases.py``: shapes with 1 and tile edges, L ≠ S both ways, B ≥ 1,
GQA/MQA, every mask kind and &, |, ~ of them, every bias, five scores, fp32/bf16/fp16 with logits up
to a few hundred, hostile NaN/±inf/1e38 in never-allowed keys, values, query rows and bias entries,
a NaN in an allowed position of q, k, v or a dense bias, and non-contiguous layouts of q, k, v and
the bias: ``tests/fuzz/_fuzz_layouts.py``) runs forward and backward on every exact backend and
``auto``, and out, dq, dk, dv are compared with ``tests/fuzz/_float64_oracle.py`` under
flash-attention's rule, 2× the float32 reference's own error plus a few ulps, with no allowance
that grows with the logits (``tests/fuzz/_fuzz_judge.py``). The JSON holds counts per
backend × dtype × mask × bias (passed / declined / failed), failure classes (backend | dtype | what
broke | hostile, poisoned, layouts), each failure's params (its repro: ``run_case(params)``), and a
summary. ``--values grid`` runs the same cases with q and k on a grid of halves (exact dot
scores: the float32 reference's error shrinks to what follows the scores). The file is rewritten
every ``--chunk`` cases;
rerunning with the same ``--out`` and ``--seed`` resumes where it stopped.

Shape legend: q (B, H, L, E), k/v (B, Hkv, S, E/Ev).
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fuzz"))

from _fuzz_cases import BUDGETS, bias_label, draw_case, mask_label  # noqa: E402
from _fuzz_judge import backends, failure_key, run_case  # noqa: E402
from _fuzz_known import classify  # noqa: E402
from common import record  # noqa: E402

STORED_PER_GROUP = 10  # repro params kept per (open request, backend, dtype); the counts are always complete


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "fuzz.json")
    ap.add_argument("--budget", choices=sorted(BUDGETS), default="small", help="shape budget (tests/fuzz/_fuzz_cases.py)")
    ap.add_argument("--chunk", type=int, default=250, help="write the JSON every this many cases")
    ap.add_argument("--fresh", action="store_true", help="ignore an existing --out instead of resuming")
    ap.add_argument("--bias-kind", default=None, help="of the --cases drawn, run only those with a bias part of this kind (custom, tensor, ...)")
    ap.add_argument("--values", choices=["drawn", "grid"], default="drawn",
                    help="grid: q and k rounded to halves of integers, so dot scores are exact and the float32 "
                         "reference's error is small beside a backend's systematic one (tests/fuzz/_fuzz_cases._values)")
    ap.add_argument("--custom-route-block", type=int, default=0,
                    help="blockwise's per-chunk bias route (attnkit.backends.blockwise.routes.custom) in blocks of this many "
                         "queries and keys, so small cases span several blocks and lse merges, with the cases' own tile "
                         "sizes dropped (they select the tile loop); counts the calls the route served")
    args = ap.parse_args(argv)
    if args.cases <= 0 or args.chunk <= 0:
        ap.error("--cases and --chunk must be positive")

    # cases are tiny: one intra-op thread avoids oversubscribing a shared machine and loses little
    torch.set_num_threads(1)
    state = _load(args.out, args.seed, args.budget) if not args.fresh else None
    state = state or {"seed": args.seed, "budget": args.budget, "cases_run": 0, "cases_failed": 0, "seconds": 0.0,
                      "counts": {}, "classes": {}, "requests": {}, "stored_per_group": {}, "failures": []}
    rng = random.Random(args.seed)
    params = [draw_case(rng, i, args.budget) for i in range(args.cases)]  # drawn in order, so a resume sees the same cases
    if args.bias_kind:  # the drawn cases with such a bias part, in the same order
        params = [p for p in params if any(part["kind"] == args.bias_kind for part in p["bias"])]
    if args.values != "drawn":  # the same cases with other values (the draw's order is untouched)
        params = [dict(p, values=args.values) for p in params]
    names = backends()
    start, t0 = state["cases_run"], time.perf_counter()
    try:
        from tqdm import tqdm

        bar = tqdm(total=len(params), initial=start, unit="case", smoothing=0.05)
    except ImportError:  # pragma: no cover - tqdm ships with the test environment
        bar = None
    route_calls = _small_custom_route(args.custom_route_block) if args.custom_route_block > 0 else None
    if args.bias_kind or route_calls is not None or args.values != "drawn":  # what selected and changed the cases
        state.update(bias_kind=args.bias_kind, custom_route_block=args.custom_route_block, values=args.values)
    for i in range(start, len(params)):
        p = params[i]
        if route_calls is not None:
            p = params[i] = dict(p, tiles=None)  # explicit tile sizes select the tile loop, not the route
        res = run_case(p, names)
        if route_calls is not None:
            state["custom_route_calls"] = state.get("custom_route_calls", 0) + route_calls.pop()
            route_calls.append(0)
        for name, v in res.verdicts.items():
            cell = (state["counts"].setdefault(name, {}).setdefault(p["dtype"], {})
                    .setdefault(mask_label(p["mask"]), {}).setdefault(bias_label(p["bias"]), {}))
            cell[v.status] = cell.get(v.status, 0) + 1
            for tag in _features(p, res):
                feat = state.setdefault("by_feature", {}).setdefault(name, {}).setdefault(tag, {})
                feat[v.status] = feat.get(v.status, 0) + 1
            if v.status == "failed":
                key = failure_key(p, name, v, res.hostile_applied, res.poisoned)
                state["classes"][key] = state["classes"].get(key, 0) + 1
                request = classify(p, name, v, res.hostile_applied, res.poisoned)
                by_req = state.setdefault("requests", {}).setdefault(request, {})
                by_req[name] = by_req.get(name, 0) + 1
                group = f"{request}|{name}|{p['dtype']}"
                stored = state.setdefault("stored_per_group", {})
                if stored.get(group, 0) < STORED_PER_GROUP:
                    stored[group] = stored.get(group, 0) + 1
                    state["failures"].append({"backend": name, "class": key, "request": request, "errors": v.errors,
                                              "tolerances": v.tolerances, "detail": v.detail, "params": p})
        state["cases_failed"] += any(v.status == "failed" for v in res.verdicts.values())
        state["cases_run"] = i + 1
        if bar is not None:
            bar.update(1)
        if (i + 1) % args.chunk == 0 or i + 1 == len(params):
            state["seconds"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            _save(args.out, state)
    if bar is not None:
        bar.close()
    print(json.dumps(state["summary"], indent=1))
    return 0


def _small_custom_route(block: int) -> list[int]:
    """Make blockwise's per-chunk bias route run ``block`` queries by ``block`` keys per kernel call;
    returns a one-item list counting the calls the route served since it was last read."""
    try:
        from attnkit.backends.blockwise.routes import custom as fused_custom
    except ImportError:  # the layout before routes/kernel/loop
        from attnkit.backends.blockwise import fused_custom

    fused_custom.BLOCK, fused_custom.CHUNK_ELEMS = block, 1
    fused_custom._CACHE.clear()
    calls, forward = [0], fused_custom.custom_forward

    def counted(*args, **kwargs):
        calls[-1] += 1
        return forward(*args, **kwargs)

    fused_custom.custom_forward = counted
    return calls


def _features(p: dict, res) -> list[str]:
    """The case's layout of each tensor (``q:transposed``, ...), its poisoned tensor and its applied
    hostile value: the rows of the JSON's ``by_feature`` counts."""
    tags = [f"layout {n}:{l}" for n, l in sorted((p.get("layout") or {}).items())] or ["layout all:contiguous"]
    if res.poisoned:
        tags.append(f"poison {p['poison']['tensor']}:{p['poison']['value']}")
    if res.hostile_applied:
        tags.append(f"hostile {p['hostile']}@{p.get('hostile_at', 'kv')}")
    return tags


def summarize(state: dict) -> dict:
    """Totals per backend; failures per open request (``_fuzz_known``) and per
    backend | dtype | numeric or exception | hostile or clean."""
    per_backend = {}
    for name, by_dtype in state["counts"].items():
        tot = collections.Counter()
        for by_mask in by_dtype.values():
            for by_bias in by_mask.values():
                for cell in by_bias.values():
                    tot.update(cell)
        per_backend[name] = dict(tot)
    coarse = collections.Counter()
    for key, n in state["classes"].items():
        name, dtype, what, hostile = key.split("|")
        kind = "exception" if what.startswith("exception") else "numeric"
        tags = [t.split("=")[0] for t in hostile.split("+")]  # hostile or clean, then poison / layout
        coarse[f"{name}|{dtype}|{kind}|{'+'.join(tags)}"] += n
    return {
        "cases_run": state["cases_run"],
        "cases_failed": state["cases_failed"],  # cases where at least one backend failed
        "backend_runs": sum(sum(c.values()) for c in per_backend.values()),
        "per_backend": per_backend,
        "failures_by_open_request": state.get("requests", {}),  # "unexplained" = no filed request claims it
        "failure_classes": dict(coarse.most_common()),
        "seconds": round(state["seconds"], 1),
    }


def _load(path: Path, seed: int, budget: str) -> dict | None:
    """The saved state of the same run (seed and budget), to resume; None to start afresh."""
    if not path.exists():
        return None
    state = json.loads(path.read_text())
    if state.get("seed") != seed or state.get("budget") != budget:
        return None
    state.pop("summary", None)
    return state


def _save(path: Path, state: dict) -> None:
    state["summary"] = summarize(state)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    record(tmp, state)
    tmp.replace(path)  # atomic: an interrupted run leaves the last complete chunk


if __name__ == "__main__":
    sys.exit(main())
