"""Latency of ``attnkit serve``'s API as a client sees it: the real server, real HTTP, one CPU thread.

Starts the server in this process on a free loopback port (torch limited to ``--threads`` intra-op
threads), warms it with a few requests, then times ``--reps`` requests of each case from the first
byte sent to the last byte parsed by ``json.loads`` (what the page waits for, minus drawing):

* ``attention_100``: ``POST /api/attention`` of a 100-token text ([CLS] and [SEP] included), each
  mask mode — the goal is p95 <= 1 s on one warm thread;
* ``attention_512``: the longest input (row summaries instead of full weights);
* ``decode_40``: ``POST /api/decode``, 40 characters with a dynamic cache.

Two clocks: wall time, and the CPU time of this process (server and client together) — on a shared
machine the wall time also counts the time spent waiting for a core, which the CPU time does not.

Prints a table and writes JSON (ms; p50, p95, max; response size). Not a test: timings depend on the
machine and on what else runs on it (the load average is recorded beside them).

    PYTHONPATH=src python benchmarks/serve_latency.py [--threads 1] [--reps 30] [--out benchmarks/results/serve_latency.json]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import statistics
import threading
import time
from pathlib import Path

import torch

from common import record

os.environ.setdefault("HF_HUB_OFFLINE", "1")

WORDS = ("The committee postponed its decision until the auditors had finished reviewing the accounts of the previous "
         "three years, and the members agreed to meet again in spring when the weather would be kinder.").split()


def text_of(tokenizer, n_tokens: int) -> str:
    """Real words, repeated as needed, cut to exactly ``n_tokens`` tokens ([CLS] and [SEP] included)."""
    tokenizer.tok.no_truncation()  # else every text past the tokenizer's max_length counts as max_length
    words, i = [], 0
    while True:
        candidate = " ".join(words + [WORDS[i % len(WORDS)]])
        if len(tokenizer.tok.encode(candidate).ids) > n_tokens:
            break
        words.append(WORDS[i % len(WORDS)])
        i += 1
    text = " ".join(words)
    got = len(tokenizer.tok.encode(text).ids)
    if got != n_tokens:  # a word of several pieces overshot: pad with one-piece words
        text += " a" * (n_tokens - got)
    return text


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def post_ms(addr, path: str, body: dict) -> tuple[float, float, int, dict]:
    """(wall ms, CPU ms of this process — server and client together, ms), body size, parsed body."""
    t, c = time.perf_counter(), time.process_time()
    conn = http.client.HTTPConnection(*addr, timeout=120)
    conn.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    parsed = json.loads(data)
    ms, cpu = (time.perf_counter() - t) * 1e3, (time.process_time() - c) * 1e3
    conn.close()
    if resp.status != 200:
        raise RuntimeError(f"{path} answered {resp.status}: {parsed}")
    return ms, cpu, len(data), parsed


def p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))]


def summarize(name: str, times: list[float], cpus: list[float], sizes: list[int], server_ms: list[float]) -> dict:
    row = {"case": name, "n": len(times), "p50_ms": round(statistics.median(times), 1), "p95_ms": round(p95(times), 1),
           "max_ms": round(max(times), 1), "cpu_p50_ms": round(statistics.median(cpus), 1), "cpu_p95_ms": round(p95(cpus), 1),
           "server_p50_ms": round(statistics.median(server_ms), 1), "response_bytes": int(statistics.median(sizes))}
    print(f"{name:24s} wall p50 {row['p50_ms']:8.1f}  p95 {row['p95_ms']:8.1f}  max {row['max_ms']:8.1f} ms | "
          f"CPU p50 {row['cpu_p50_ms']:7.1f}  p95 {row['cpu_p95_ms']:7.1f} ms | "
          f"server {row['server_p50_ms']:.1f} ms, {row['response_bytes'] / 1e6:.2f} MB", flush=True)
    return row


def run_case(addr, name: str, path: str, body: dict, reps: int) -> dict:
    times, cpus, sizes, server = [], [], [], []
    for _ in range(reps):
        ms, cpu, size, parsed = post_ms(addr, path, body)
        times.append(ms)
        cpus.append(cpu)
        sizes.append(size)
        server.append(parsed["elapsed_ms"])
    return summarize(name, times, cpus, sizes, server)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out", default="benchmarks/results/serve_latency.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from attnkit.serve.server import make_server

    t0 = time.perf_counter()
    srv = make_server("127.0.0.1", 0)
    load_s = time.perf_counter() - t0
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    addr = srv.server_address[:2]
    text100 = text_of(srv.attention.tokenizer, 100)
    text512 = text_of(srv.attention.tokenizer, 512)
    for _ in range(3):  # warm: allocator, first decode (trains or reads the cached decoder)
        post_ms(addr, "/api/attention", {"text": text100})
    post_ms(addr, "/api/decode", {"prompt": "And God said, ", "steps": 5})
    rows = [run_case(addr, f"attention_100_{m}", "/api/attention", {"text": text100, "mask": m}, args.reps)
            for m in ("none", "causal", "window", "padding")]
    rows.append(run_case(addr, "attention_512_none", "/api/attention", {"text": text512}, max(5, args.reps // 3)))
    rows.append(run_case(addr, "decode_40_dynamic", "/api/decode", {"prompt": "And God said, ", "steps": 40}, args.reps))
    srv.shutdown()
    out = {
        "what": "client-side latency of the attnkit serve API (HTTP round trip + json.loads), real server in-process",
        "threads": torch.get_num_threads(), "reps": args.reps, "model_load_s": round(load_s, 2),
        "goal": "attention_100 p95 <= 1000 ms on one warm CPU thread",
        "goal_met_cpu": all(r["cpu_p95_ms"] <= 1000 for r in rows if r["case"].startswith("attention_100")),
        "goal_met_wall": all(r["p95_ms"] <= 1000 for r in rows if r["case"].startswith("attention_100")),
        "note": "wall times include waiting for the CPU on a shared machine (see load_average_1min); CPU times are this "
                "process's (server and client in one process, torch on one thread)",
        "machine": {"cpu": cpu_name(), "cores": os.cpu_count(),
                    "load_average_1min": round(os.getloadavg()[0], 2), "torch": torch.__version__},
        "rows": rows,
    }
    record(args.out, out, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
