"""Decoding speed: a KV cache vs recomputing the prefix every step, on the toy decoder.

For 1- and 4-layer :class:`~attnkit.models.toy_decoder.ToyDecoder` models (fp32, B=1, D=512,
H=8, E=64, RoPE) it greedily generates ``--tokens`` tokens (1,024 by default) after a short prompt:

* ``dynamic`` / ``static`` — attnkit's caches through ``MultiHeadAttention(cache=...)``;
* ``sdpa_raw`` — the same weights decoded by a hand-written loop over
  ``F.scaled_dot_product_attention`` with preallocated buffers (no attnkit in the attention path):
  the ratio attnkit/sdpa_raw is the library's overhead per token;
* ``recompute`` — no cache: the whole prefix runs through the model at every step.

All variants must produce the same tokens (checked). Reported: tokens/s (median of repeats),
per-token time at each position (median over repeats; plotted to show it stays flat with a cache
and grows linearly without), and the cache's peak bytes, static vs dynamic (``peak_nbytes``:
allocated key/value/position buffers, counting old + new during a dynamic cache's doubling).

Runs on one intra-op thread: the benchmark machine is shared, and two spinning threads on busy
cores made small ops 10-70x slower (tests/decoding/conftest.py). Run it with ``nice``:

    nice -n 10 python benchmarks/decoding.py            # → benchmarks/results/decoding.json/.png
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from attnkit.models.toy_decoder import ToyDecoder

from common import record

RESULTS = Path(__file__).resolve().parent / "results"


@torch.no_grad()
def timed_generate(model: ToyDecoder, prompt: torch.Tensor, n: int, kind: str | None, **kw):
    """Greedy generation, returning (tokens, per-step seconds, caches)."""
    times, out = [], []
    if kind is None:
        seq = prompt
        for _ in range(n):
            t0 = time.perf_counter()
            nxt = model(seq)[:, -1].argmax(-1, keepdim=True)
            times.append(time.perf_counter() - t0)
            out.append(nxt)
            seq = torch.cat([seq, nxt], 1)
        return torch.cat(out, 1), times, None
    caches = model.make_caches(kind, **kw)
    t0 = time.perf_counter()
    nxt = model(prompt, caches=caches)[:, -1].argmax(-1, keepdim=True)
    times.append(time.perf_counter() - t0)
    out.append(nxt)
    for _ in range(n - 1):
        t0 = time.perf_counter()
        nxt = model(nxt, caches=caches)[:, -1].argmax(-1, keepdim=True)
        times.append(time.perf_counter() - t0)
        out.append(nxt)
    return torch.cat(out, 1), times, caches


@torch.no_grad()
def timed_generate_sdpa_raw(model: ToyDecoder, prompt: torch.Tensor, n: int):
    """The same model decoded by hand: preallocated K/V, RoPE, F.scaled_dot_product_attention."""
    B, P = prompt.shape
    T = P + n
    blocks = list(model.blocks)
    a0 = blocks[0].attn
    H, Hkv, E = a0.num_heads, a0.kv_heads, a0.head_dim
    K = [torch.zeros(B, Hkv, T, E) for _ in blocks]
    V = [torch.zeros(B, Hkv, T, E) for _ in blocks]
    gqa = {"enable_gqa": True} if Hkv != H else {}

    def step(tokens, t0):
        L = tokens.shape[1]
        pos = torch.arange(t0, t0 + L)
        x = model.embed(tokens)
        for i, blk in enumerate(blocks):
            a = blk.attn
            h = blk.ln1(x)
            q = a.q_proj(h).view(B, L, H, E).transpose(1, 2)
            k = a.k_proj(h).view(B, L, Hkv, E).transpose(1, 2)
            v = a.v_proj(h).view(B, L, Hkv, E).transpose(1, 2)
            q, k = a.rotary(q, pos), a.rotary(k, pos)
            K[i][:, :, t0:t0 + L], V[i][:, :, t0:t0 + L] = k, v
            o = F.scaled_dot_product_attention(q, K[i][:, :, :t0 + L], V[i][:, :, :t0 + L], is_causal=L > 1, **gqa)
            x = x + a.out_proj(o.transpose(1, 2).reshape(B, L, H * E))
            x = x + blk.mlp(blk.ln2(x))
        return model.head(model.ln_f(x))[:, -1].argmax(-1, keepdim=True)

    times, out = [], []
    t = time.perf_counter()
    nxt = step(prompt, 0)
    times.append(time.perf_counter() - t)
    out.append(nxt)
    for j in range(n - 1):
        t = time.perf_counter()
        nxt = step(nxt, P + j)
        times.append(time.perf_counter() - t)
        out.append(nxt)
    return torch.cat(out, 1), times


def rolling_median(xs: list[float], w: int) -> list[float]:
    """Centered rolling median: a shared machine adds millisecond spikes to single steps."""
    h = w // 2
    return [statistics.median(xs[max(0, i - h): i + h + 1]) for i in range(len(xs))]


def per_position_median(runs: list[list[float]]) -> list[float]:
    return [statistics.median(col) for col in zip(*runs)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--prompt", type=int, default=8)
    ap.add_argument("--layers", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--dim", type=int, default=512, help="model width; heads are 8, so E = dim/8 (64 by default, as in PERF-NOTES)")
    ap.add_argument("--repeats", type=int, default=3, help="repeats of the cached runs (recompute runs once)")
    ap.add_argument("--out", default=str(RESULTS / "decoding"))
    ap.add_argument("--plot-only", action="store_true", help="redraw the PNG from an existing JSON")
    args = ap.parse_args()
    if args.plot_only:
        out = Path(args.out)
        plot(json.loads(out.with_suffix(".json").read_text()), out.with_suffix(".png"))
        return
    torch.set_num_threads(1)
    torch.manual_seed(0)
    results = {
        "config": {
            "tokens": args.tokens, "prompt": args.prompt, "batch": 1, "dim": args.dim, "heads": 8, "kv_heads": 8, "position": "rope",
            "dtype": "float32", "threads": 1, "repeats_cached": args.repeats, "repeats_recompute": 1,
            "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
        },
        "models": {},
    }
    for layers in args.layers:
        model = ToyDecoder(256, args.dim, 8, num_layers=layers, position="rope", max_positions=args.prompt + args.tokens + 1).eval()
        prompt = torch.randint(0, 256, (1, args.prompt))
        row: dict = {}
        ref_tokens = None
        variants = [("dynamic", {}), ("static", {"max_len": args.prompt + args.tokens}), ("sdpa_raw", None)]
        runs: dict[str, list] = {name: [] for name, _ in variants}
        last_caches: dict = {}
        for _ in range(args.repeats):  # variants interleaved, so a burst of load on the shared machine hits all of them
            for name, kw in variants:
                if name == "sdpa_raw":
                    toks, times = timed_generate_sdpa_raw(model, prompt, args.tokens)
                else:
                    toks, times, last_caches[name] = timed_generate(model, prompt, args.tokens, name, **kw)
                if ref_tokens is None:
                    ref_tokens = toks
                if not torch.equal(toks, ref_tokens):
                    raise RuntimeError(f"{name} generated different tokens than the first variant")
                runs[name].append(times)
        for name, _ in variants:
            totals = [sum(r) for r in runs[name]]
            row[name] = {
                "tokens_per_s": args.tokens / statistics.median(totals),
                "total_s_median": statistics.median(totals),
                "per_token_ms": [1e3 * t for t in per_position_median(runs[name])],
            }
            if name in last_caches:
                row[name]["cache_peak_bytes"] = sum(c.peak_nbytes for c in last_caches[name])
                row[name]["cache_final_bytes"] = sum(c.nbytes for c in last_caches[name])
            print(f"layers={layers} {name:9s} {row[name]['tokens_per_s']:9.1f} tok/s", flush=True)
        toks, times, _ = timed_generate(model, prompt, args.tokens, None)
        if not torch.equal(toks, ref_tokens):
            raise RuntimeError("recompute generated different tokens than the cached variants")
        row["recompute"] = {"tokens_per_s": args.tokens / sum(times), "total_s_median": sum(times), "per_token_ms": [1e3 * t for t in times]}
        print(f"layers={layers} recompute {row['recompute']['tokens_per_s']:9.1f} tok/s", flush=True)
        for name in ("dynamic", "static"):
            row[name]["speedup_vs_recompute"] = row[name]["tokens_per_s"] / row["recompute"]["tokens_per_s"]
            row[name]["time_ratio_vs_sdpa_raw"] = row["sdpa_raw"]["tokens_per_s"] / row[name]["tokens_per_s"]
            pt = row[name]["per_token_ms"][1:]  # step 0 is the prompt
            q = len(pt) // 8
            row[name]["per_token_ms_first_eighth_median"] = statistics.median(pt[:q])
            row[name]["per_token_ms_last_eighth_median"] = statistics.median(pt[-q:])
            # "at 1,024 tokens": per-token time over the last eighth of positions, recompute / cache
            row[name]["speedup_vs_recompute_last_eighth"] = statistics.median(row["recompute"]["per_token_ms"][1:][-q:]) / row[name]["per_token_ms_last_eighth_median"]
            print(
                f"layers={layers} {name}: {row[name]['speedup_vs_recompute']:.1f}x recompute overall, "
                f"{row[name]['speedup_vs_recompute_last_eighth']:.1f}x over the last eighth, {row[name]['time_ratio_vs_sdpa_raw']:.2f}x sdpa_raw time, "
                f"per-token {row[name]['per_token_ms_first_eighth_median']:.3f} → {row[name]['per_token_ms_last_eighth_median']:.3f} ms, "
                f"cache peak {row[name]['cache_peak_bytes'] / 2**20:.2f} MiB",
                flush=True,
            )
        results["models"][f"{layers}_layer"] = row
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    record(out.with_suffix(".json"), results)
    print(f"wrote {out.with_suffix('.json')}")
    plot(results, out.with_suffix(".png"))


def plot(results: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # viz extra not installed: the JSON is the result
        print("matplotlib missing; no plot")
        return
    models = results["models"]
    fig, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 4), squeeze=False)
    for ax, (name, row) in zip(axes[0], models.items()):
        for variant, style in (("recompute", "-"), ("dynamic", "-"), ("static", "--"), ("sdpa_raw", ":")):
            ms = rolling_median(row[variant]["per_token_ms"][1:], 33)
            ax.plot(range(1, len(ms) + 1), ms, style, label=f"{variant} ({row[variant]['tokens_per_s']:.0f} tok/s)", linewidth=1.2)
        ax.set_yscale("log")
        ax.set_xlabel("position of generated token")
        ax.set_ylabel("ms per token (rolling median of 33 positions)")
        ax.set_title(f"toy decoder, {name.replace('_', ' ')}, fp32, B=1")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
