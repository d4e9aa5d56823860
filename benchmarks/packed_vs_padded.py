"""Packed (varlen) vs padded multi-head attention on a batch with real text's length distribution.

The lengths: token counts of King James Bible verses (SWORD module ``engKJV2006eb`` under
/usr/share/sword, read with pysword; a token is a word or a punctuation mark, regex ``\\w+|[^\\w\\s]``).
A batch of ``--batch`` verses is sampled (seeded) from all ~31k verses. If the module or pysword is
missing, the batch lengths saved by an earlier run in the results JSON are reused, and the JSON says so.

What runs, forward + backward of one causal self-attention layer (``attnkit.MultiHeadAttention``,
D = 512, H = 8, E = 64, float32, one thread), with the same weights:

* ``packed``: x (T, D) with ``cu_seqlens`` — the T real tokens only (:mod:`attnkit.modules.mha_packed`);
* ``padded``: x (B, L_max, D) with a (B, L_max) attention mask, every row padded to the longest verse;
* ``doc_mask``: the packed tokens as one (1, T, D) row with a document-id mask (``masks.document`` &
  ``causal``) over the whole axis, the other exact way to run a packed batch: backend ``auto`` skips
  the empty tiles of the (T, T) grid, but tiles that straddle a boundary are computed and masked;
* ``torch_padded``: ``torch.nn.MultiheadAttention`` on the padded batch (its attention is PyTorch's
  ``scaled_dot_product_attention``): the yardstick every ratio is also given against.

Time: median of ``--reps`` interleaved repetitions after a warm-up, in this process. Memory: each case
in a fresh process (``common.reset_peak``): after the module and inputs exist the peak-RSS counter is reset,
one forward + backward runs, and ``VmHWM - VmRSS_before`` is the extra memory it needed; median of
``--mem-reps`` processes. The 1-minute load average is recorded before and after (the machine is shared).

Run:  PYTHONPATH=src python benchmarks/packed_vs_padded.py  [--batch 64 --reps 9]
Saves benchmarks/results/packed_vs_padded.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: the shared helpers
from common import record, reset_peak, status_kib  # noqa: E402

import torch  # noqa: E402

import attnkit  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "packed_vs_padded.json"
D, H = 512, 8
CASES = ("packed", "padded", "doc_mask", "torch_padded")


def kjv_lengths() -> list[int]:
    """Token count of every non-empty KJV verse (~31k; reading the module takes about a minute)."""
    from pysword.modules import SwordModules

    mods = SwordModules("/usr/share/sword")
    mods.parse_modules()
    bible = mods.get_bible_from_module("engKJV2006eb")
    tok = re.compile(r"\w+|[^\w\s]")
    return [n for n in (len(tok.findall(v)) for v in bible.get_iter(clean=True)) if n > 0]


def summary(xs: list[int]) -> dict:
    s = sorted(xs)
    q = lambda p: s[min(len(s) - 1, int(p * len(s)))]  # noqa: E731
    return {"n": len(s), "min": s[0], "max": s[-1], "mean": statistics.mean(s), "median": statistics.median(s),
            "p10": q(0.1), "p90": q(0.9), "p99": q(0.99), "distinct": len(set(s))}


def build(case: str, lengths: list[int]):
    """The module and a closure running one forward + backward of ``case``."""
    torch.manual_seed(0)
    ref = torch.nn.MultiheadAttention(D, H, batch_first=True)
    g = torch.Generator().manual_seed(1)
    B, Lmax, T = len(lengths), max(lengths), sum(lengths)
    valid = torch.arange(Lmax)[None, :] < torch.tensor(lengths)[:, None]  # (B, Lmax)
    x_packed = torch.randn(T, D, generator=g)
    x_padded = x_packed.new_zeros(B, Lmax, D)
    x_padded[valid] = x_packed  # the same tokens, row by row
    if case == "torch_padded":
        future = torch.ones(Lmax, Lmax, dtype=torch.bool).triu(1)

        def run():
            out, _ = ref(x_padded, x_padded, x_padded, key_padding_mask=~valid, attn_mask=future, need_weights=False)
            out[valid].sum().backward()
            return out[valid]

        return ref, run
    mha = attnkit.MultiHeadAttention.from_torch(ref)
    cu = torch.tensor([0, *lengths]).cumsum(0)
    am = valid.long()

    doc = attnkit.masks.document(torch.repeat_interleave(torch.arange(B), torch.tensor(lengths))) & attnkit.masks.causal()

    def run():
        if case == "packed":
            out, _ = mha(x_packed, cu_seqlens=cu, causal=True)
            out.sum().backward()
            return out
        if case == "doc_mask":
            out, _ = mha(x_packed[None], mask=doc)
            out.sum().backward()
            return out[0]
        out, _ = mha(x_padded, attention_mask=am, causal=True)
        out[valid].sum().backward()
        return out[valid]

    return mha, run


def zero_grads(m) -> None:
    for p in m.parameters():
        p.grad = None


def time_cases(lengths: list[int], reps: int) -> tuple[dict, float]:
    runs = {c: build(c, lengths) for c in CASES}
    outs = {}
    for c, (m, run) in runs.items():  # warm-up, and the outputs for the agreement check
        outs[c] = run().detach()
        zero_grads(m)
        run()
        zero_grads(m)
    diff = max((outs[c] - outs["torch_padded"]).abs().max().item() for c in CASES)
    times: dict[str, list[float]] = {c: [] for c in CASES}
    for _ in range(reps):
        for c, (m, run) in runs.items():
            t0 = time.perf_counter()
            run()
            times[c].append((time.perf_counter() - t0) * 1e3)
            zero_grads(m)
    return times, diff


def memory_child(case: str, lengths: list[int]) -> None:
    """In a fresh process: extra resident KiB of one forward + backward of ``case``."""
    torch.set_num_threads(1)
    m, run = build(case, lengths)
    exact = reset_peak()
    before = status_kib("VmRSS")
    run()
    print(json.dumps({"extra_kib": status_kib("VmHWM") - before, "peak_reset": exact}))


def memory_case(case: str, lengths: list[int], reps: int) -> dict:
    vals, exact = [], True
    for _ in range(reps):
        env = dict(os.environ, OMP_NUM_THREADS="1")
        out = subprocess.run(
            [sys.executable, __file__, "--memory-case", case, "--lengths", json.dumps(lengths)],
            capture_output=True, text=True, check=True, env=env,
        ).stdout.strip().splitlines()[-1]
        r = json.loads(out)
        vals.append(r["extra_kib"] / 1024)
        exact = exact and r["peak_reset"]
    return {"extra_mib_median": statistics.median(vals), "extra_mib": vals, "peak_reset": exact}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--mem-reps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--memory-case", choices=CASES, help=argparse.SUPPRESS)
    ap.add_argument("--lengths", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.memory_case:
        memory_child(a.memory_case, json.loads(a.lengths))
        return
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    try:
        all_lengths = kjv_lengths()
        source = "KJV verses (SWORD engKJV2006eb via pysword), word + punctuation tokens"
        lengths = random.Random(a.seed).sample(all_lengths, a.batch)
        corpus = summary(all_lengths)
    except (ImportError, OSError, KeyError, ValueError) as e:
        prev = json.loads(a.out.read_text())
        lengths, corpus = prev["batch_lengths"], prev.get("corpus_lengths")
        source = f"fallback: the batch lengths saved in {a.out.name} by an earlier KJV run ({type(e).__name__}: {e})"
    times, diff = time_cases(lengths, a.reps)
    med = {c: statistics.median(t) for c, t in times.items()}
    mem = {c: memory_case(c, lengths, a.mem_reps) for c in CASES}
    res = {
        "what": "one causal self-attention layer, forward + backward: packed (cu_seqlens) vs padded batch",
        "lengths_source": source, "corpus_lengths": corpus, "batch_lengths": lengths, "batch_summary": summary(lengths),
        "tokens": {"real": sum(lengths), "padded": len(lengths) * max(lengths),
                   "padded_over_real": len(lengths) * max(lengths) / sum(lengths)},
        "model": {"D": D, "H": H, "E": D // H, "dtype": "float32", "mask": "causal"},
        "torch": torch.__version__, "threads": torch.get_num_threads(), "reps": a.reps, "mem_reps": a.mem_reps,
        "median_ms": med, "times_ms": times,
        "speedup_packed_over_padded": med["padded"] / med["packed"],
        "speedup_vs_torch_padded": {c: med["torch_padded"] / med[c] for c in CASES if c != "torch_padded"},
        "memory": mem,
        "memory_padded_over_packed": mem["padded"]["extra_mib_median"] / mem["packed"]["extra_mib_median"],
        "max_abs_diff_vs_torch_padded": diff,
        "load_avg_before": list(load_before), "load_avg_after": list(os.getloadavg()), "cpu_count": os.cpu_count(),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    record(a.out, res)
    print(f"lengths: {source}; batch {summary(lengths)}")
    for c in CASES:
        print(f"{c:13s} {med[c]:8.1f} ms   {mem[c]['extra_mib_median']:8.1f} MiB")
    print(f"packed is {res['speedup_packed_over_padded']:.2f}x faster than padded and uses "
          f"{res['memory_padded_over_packed']:.2f}x less memory; max |diff| {diff:.2e}")
    print(f"load {load_before} -> {os.getloadavg()}; wrote {a.out}")


if __name__ == "__main__":
    main()
