"""What the benchmark scripts share: timers, peak memory, the cases several scripts time, and
:func:`record`, which stamps every JSON with where and how it was made.

Each script runs as ``python benchmarks/NAME.py``; the folder is then on ``sys.path`` and the script
imports this module as ``common`` (``import common`` or ``from common import ...``). No script
imports another script's names: what two scripts share lives here, public.

Timing. A CUDA call returns before its kernels finish, so a wall clock around it measures the
launch, not the work. On CUDA each call is bracketed by two CUDA events recorded on the current
stream and read after ``torch.cuda.synchronize()``; on any other device the wall clock
(``time.perf_counter``) around the call, which there runs to completion::

    first_ms, out = first_call(fn, device)   # compiles, autotuning, caches: reported apart
    fn()                                     # a second warm-up
    times = time_calls(fn, reps, device)     # milliseconds of each call; report their median
    times = interleaved_times({"auto": f, "sdpa": g}, rounds)   # seconds per call, per variant

Memory. Peak resident memory of this process from /proc (Linux), for benchmarks that measure memory
in a fresh process per case: reset the high-water mark, run, read ``VmHWM - VmRSS`` in KiB
(:func:`time_and_peak`).

Provenance. ``record(path, doc)`` writes ``doc`` with a ``"provenance"`` entry: the script, its
arguments, the commit (and whether the tree had changes), torch's version, the CPU model and flags,
and torch's thread count (the stamp ``attnkit bench`` writes too); ``benchmarks/README.md`` indexes
every file it writes.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Callable

import torch

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
B, H, E = 1, 8, 64  # the speed goals' shape: one sequence, 8 heads of 64
WINDOW = 256  # the sliding window's keys, the query's own included
DOCS, CHUNK, PREFIX = 16, 1024, 1024  # document: 16 equal documents; chunked causal chunks; prefix-LM prefix


# ------------------------------------------------------------------ timing
def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def first_call(fn: Callable[[], object], device: torch.device | str) -> tuple[float, object]:
    """(wall-clock milliseconds, result) of one call of ``fn`` through to the end of its work (the
    device synchronized before and after): a first call's compile and warm-up included."""
    device = torch.device(device)
    _sync(device)
    t0 = time.perf_counter()
    out = fn()
    _sync(device)
    return (time.perf_counter() - t0) * 1e3, out


def time_calls(fn: Callable[[], object], reps: int, device: torch.device | str) -> list[float]:
    """Milliseconds of each of ``reps`` calls of ``fn``: CUDA events around each call on CUDA, the
    wall clock elsewhere. Warm ``fn`` up first (:func:`first_call` and one more call)."""
    if reps < 1:
        raise ValueError(f"reps must be at least 1, got {reps}; pass the number of timed calls")
    device = torch.device(device)
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(device)
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return times


def interleaved_times(variants: dict[str, Callable[[], object]], rounds: int, warmup: int = 1) -> dict[str, list[float]]:
    """Wall-clock seconds of each variant's calls over ``rounds`` rounds, each round calling every
    variant once in turn, so load drift on a shared machine hits all alike; ``warmup`` untimed rounds
    first (caches, first-call paths). CPU only: no device is synchronized."""
    for _ in range(warmup):
        for f in variants.values():
            f()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, f in variants.items():
            t0 = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t0)
    return times


# ------------------------------------------------------------------ memory
def status_kib(field: str) -> int:
    """A ``/proc/self/status`` field in KiB (``VmRSS``, ``VmHWM``)."""
    with open("/proc/self/status") as f:
        return int(re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M).group(1))


def reset_peak() -> bool:
    """Reset ``VmHWM`` to the current RSS (writing 5 to clear_refs); False where the kernel refuses,
    in which case the peak also counts what the process held before."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def time_and_peak(call: Callable[[], object], reps: int) -> tuple[float, list[float], float, bool, object]:
    """One warm-up ``call()`` (its seconds reported: a compile shows here), ``reps`` timed calls, then
    one more with the high-water mark reset: (first call s, [s per timed call], peak KiB above what
    was live before that last call, whether the reset worked, the last call's result)."""
    t0 = time.perf_counter()
    call()
    first = time.perf_counter() - t0
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    exact = reset_peak()
    before = status_kib("VmRSS")
    result = call()
    return first, times, status_kib("VmHWM") - before, exact, result


# ------------------------------------------------------------------ the machine and the run
def cpu_flags() -> dict:
    """The CPU's model name and the instruction-set flags that change attention's speed
    (:func:`attnkit.bench.provenance.cpu_flags`, imported here only when called: a worker running an
    earlier checkout's ``src/`` never calls it)."""
    from attnkit.bench.provenance import cpu_flags as flags

    return flags()


def tag_suffix(ap, tag: str | None) -> str:
    """``"_TAG"`` for a results file name (another machine's run), ``""`` without ``--tag``; a tag
    that could not name a file stops the parser ``ap`` with the fix."""
    if tag is None:
        return ""
    if not re.fullmatch(r"[a-z0-9_]+", tag):
        ap.error(f"--tag must be lower-case letters, digits and '_' (it names a file), got {tag!r}")
    return f"_{tag}"


def record(path: Path | str, doc: dict, argv: list[str] | None = None, indent: int = 1) -> Path:
    """Write ``doc`` as JSON to ``path`` with a ``"provenance"`` entry first (the script, its arguments,
    the commit, torch, the CPU and threads: :func:`attnkit.bench.provenance.provenance`) and return the
    path; every benchmark writes its results through this, so no JSON lacks its commit."""
    from attnkit.bench.provenance import provenance

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = provenance(script=f"benchmarks/{Path(sys.argv[0]).name}", argv=argv, repo=ROOT)
    stamped = {"provenance": stamp, **{k: v for k, v in doc.items() if k != "provenance"}}
    path.write_text(json.dumps(stamped, indent=indent, default=str) + "\n", encoding="utf-8")
    return path


# ------------------------------------------------------------------ cases several scripts time
def race_mask(kind: str, L: int, S: int):
    """The attnkit mask of a ``flex_race.py`` case: ``window``, ``document``, ``chunked``, ``prefix_lm``
    or (anything else) ``causal``."""
    from attnkit import masks as M

    if kind == "window":
        return M.sliding_window(WINDOW - 1, 0)
    if kind == "document":
        return M.document(torch.arange(S) * DOCS // S)
    if kind == "chunked":
        return M.chunked(CHUNK)
    if kind == "prefix_lm":
        return M.prefix_lm(PREFIX)
    return M.causal()


def _flex_mask_mod(kind: str, L: int, S: int):
    """FlexAttention's ``mask_mod`` for the same case as :func:`race_mask` (bottom-right aligned)."""
    off = S - L
    doc = torch.arange(S) * DOCS // S
    if kind == "window":
        return lambda b, h, qi, ki: (ki <= qi + off) & (ki >= qi + off - (WINDOW - 1))
    if kind == "document":
        return lambda b, h, qi, ki: doc[qi] == doc[ki]
    if kind == "chunked":
        return lambda b, h, qi, ki: (ki <= qi + off) & ((qi + off) // CHUNK == ki // CHUNK)
    if kind == "prefix_lm":
        return lambda b, h, qi, ki: (ki < PREFIX) | (ki <= qi + off)
    return lambda b, h, qi, ki: ki <= qi + off


def race_call(kind: str, L: int, S: int, dtype, impl: str):
    """(fn(q, k, v) -> out, label of the backend that ran or None) for one implementation of a masked
    case: ``attnkit_auto``, ``blockwise_before`` (the earlier code on PYTHONPATH), ``blockwise_fused``,
    ``blockwise_tiles`` (the fused kernel off), ``sdpa_mask`` (a dense mask built once), ``sdpa_causal``
    or ``flex`` (compiled FlexAttention)."""
    import attnkit

    mask = race_mask(kind, L, S)
    if impl == "attnkit_auto":
        return (lambda q, k, v: attnkit.attention(q, k, v, mask=mask)), "auto"
    if impl == "blockwise_before":  # the earlier code has no fused-kernel switch to set
        return (lambda q, k, v: attnkit.attention(q, k, v, mask=mask, backend="blockwise")), "blockwise"
    if impl in ("blockwise_fused", "blockwise_tiles"):
        try:
            from attnkit.backends.blockwise.kernel import gate as fused_gate
        except ImportError:  # the layout before routes/kernel/loop (--before-src)
            from attnkit.backends.blockwise import fused_gate

        fused_gate.set_enabled(impl == "blockwise_fused")
        return (lambda q, k, v: attnkit.attention(q, k, v, mask=mask, backend="blockwise")), "blockwise"
    if impl == "sdpa_mask":
        dense = mask.materialize(L, S)[0, 0]  # (L, S) bool, built once outside the timed calls
        return (lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=dense)), None
    if impl == "sdpa_causal":
        return (lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)), None
    if impl == "flex":
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        bm = create_block_mask(_flex_mask_mod(kind, L, S), None, None, L, S, device="cpu")
        compiled = torch.compile(flex_attention)
        return (lambda q, k, v: compiled(q, k, v, block_mask=bm)), None
    raise ValueError(f"impl must be one of the implementations in flex_race.CASES, got {impl!r}")


def bias_8k(kind: str, wrap=lambda fn: fn):
    """The bias of a ``bias_and_small.py`` ``bias8k`` row (``alibi``, ``t5`` or ``custom``); ``wrap``
    is applied to the custom bias's function (a timer in ``kernel_floor.py``)."""
    from attnkit import biases

    if kind == "alibi":
        return biases.ALiBi(H)
    if kind == "t5":
        torch.manual_seed(0)
        return biases.T5RelativeBias(H, bidirectional=True)
    slopes = torch.linspace(0.05, 0.5, H)

    def log_distance(b, h, q, kv):  # a user's function: attnkit knows only that it depends on the head
        return -slopes[h] * torch.log1p((q - kv).abs().float())

    return biases.custom_bias(wrap(log_distance), depends_on=("h",))


def mask_8k(kind: str):
    """The mask of a ``bias8k`` row: None for ``none``, else causal."""
    from attnkit import masks

    return None if kind == "none" else masks.causal()
