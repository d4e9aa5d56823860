"""Seq2seq speed: training tokens/s of the four models, and Transformer decoding with and without
the KV cache, greedy versus beam 4.

* **training** — each model of the seq2seq experiment (``rnn``, ``bahdanau``, ``luong``,
  ``transformer``, sized to one parameter budget by :func:`attnkit.experiments.seq2seq.models.match_budget`)
  takes ``--steps`` Adam steps on random batches of B sources of S tokens and targets of T tokens;
  reported: target tokens per second (median over steps after a warm-up) and source tokens per
  second; then the same model (untrained, EOS suppressed) decodes T tokens greedily for the last
  batch's B sources, with its cache: output tokens per second, median of ``--repeats``. The recurrent decoders run one step per target token (a Python loop with one attention
  call per step), the Transformer one pass for all T: the gap grows with T.
* **decoding** — a Transformer (``--d-model``, 2+2 layers) generates ``--out-len`` tokens for B
  sources: greedy with the caches (self-attention cache growing one token a step, cross-attention
  keys/values projected once), greedy recomputing the prefix every step, and beam 4 with the
  caches. EOS is suppressed so every run decodes the same number of steps; the cached and
  recomputed greedy outputs must agree token for token (checked). Reported: output tokens per
  second (median of ``--repeats``).

One intra-op thread (the benchmark machine is shared; see benchmarks/decoding.py). Run it with::

    nice -n 10 python benchmarks/seq2seq_speed.py      # → benchmarks/results/seq2seq_speed.json
    python benchmarks/seq2seq_speed.py --smoke         # seconds: tiny sizes, checks it runs
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from pathlib import Path

import torch

from attnkit.data.tokenize import BOS, EOS
from attnkit.experiments.seq2seq.evaluate import token_loss
from attnkit.experiments.seq2seq.models import MODELS, build, match_budget
from attnkit.models.decoding import beam_search, greedy_decode
from attnkit.models.transformer import Seq2SeqTransformer

from common import record

RESULTS = Path(__file__).resolve().parent / "results"


def _batch(B: int, S: int, T: int, V: int, g: torch.Generator) -> dict:
    src = torch.randint(4, V, (B, S), generator=g)
    y = torch.randint(4, V, (B, T), generator=g)
    return {"src": src, "src_len": torch.full((B,), S), "tgt_in": torch.cat([torch.full((B, 1), BOS), y[:, :-1]], 1), "tgt_out": y}


def bench_training(args) -> dict:
    cfg = {"params": args.params, "layers": 2, "heads": 4}
    sizes = match_budget(list(MODELS), args.vocab, args.vocab, cfg)
    g = torch.Generator().manual_seed(0)
    out = {}
    for name in MODELS:
        torch.manual_seed(0)
        model = build(name, sizes[name]["width"], args.vocab, args.vocab, cfg)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        times = []
        for step in range(args.steps + 2):
            b = _batch(args.batch, args.src_len, args.tgt_len, args.vocab, g)
            t0 = time.perf_counter()
            loss = token_loss(model, b)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step >= 2:  # warm-up steps allocate and pick kernels
                times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        dec = _greedy_seconds(model.eval(), b["src"], b["src_len"], args.tgt_len, args.repeats)
        out[name] = {"params": sizes[name]["params"], "width": sizes[name]["width"], "step_ms": 1000 * med,
                     "tgt_tokens_per_s": args.batch * args.tgt_len / med, "src_tokens_per_s": args.batch * args.src_len / med,
                     "greedy_s": dec, "greedy_out_tokens_per_s": args.batch * args.tgt_len / dec}
        print(f"train {name:12s} {out[name]['params']:8,d} params  {out[name]['step_ms']:8.1f} ms/step  {out[name]['tgt_tokens_per_s']:9.0f} target tok/s"
              f"  | greedy {out[name]['greedy_out_tokens_per_s']:8.0f} output tok/s")
    return out


class _NoEOS(torch.nn.Module):
    """Wrap a model so EOS is never chosen: every variant decodes exactly the same number of steps."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def start(self, *a, **k):
        return self.model.start(*a, **k)

    def decode_step(self, state, tokens):
        logits = self.model.decode_step(state, tokens)
        logits[:, EOS] = float("-inf")
        return logits


def _greedy_seconds(model, src: torch.Tensor, src_len: torch.Tensor, out_len: int, repeats: int) -> float:
    """Median seconds of greedy decoding ``out_len`` tokens (EOS suppressed, with the model's caches)."""
    wrapped, times = _NoEOS(model), []
    with torch.no_grad():
        for _ in range(repeats):
            t0 = time.perf_counter()
            greedy_decode(wrapped, src, src_len, max_len=out_len, use_cache=True)
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_decoding(args) -> dict:
    torch.manual_seed(0)
    model = Seq2SeqTransformer(args.vocab, args.vocab, d_model=args.d_model, nhead=4, num_encoder_layers=2, num_decoder_layers=2,
                               dim_feedforward=2 * args.d_model, dropout=0.0).eval()
    wrapped = _NoEOS(model)
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, args.vocab, (args.batch, args.src_len), generator=g)
    src_len = torch.full((args.batch,), args.src_len)
    runs = {
        "greedy_cache": lambda: greedy_decode(wrapped, src, src_len, max_len=args.out_len, use_cache=True),
        "greedy_recompute": lambda: greedy_decode(wrapped, src, src_len, max_len=args.out_len, use_cache=False),
        "beam4_cache": lambda: beam_search(wrapped, src, src_len, beam_size=4, max_len=args.out_len, use_cache=True),
    }
    out, tokens = {}, {}
    for name, fn in runs.items():
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            tokens[name] = fn().tokens
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        out[name] = {"seconds": med, "out_tokens_per_s": args.batch * args.out_len / med}
        print(f"decode {name:17s} {out[name]['seconds']:7.3f} s  {out[name]['out_tokens_per_s']:8.0f} output tok/s")
    if not torch.equal(tokens["greedy_cache"], tokens["greedy_recompute"]):
        raise SystemExit("greedy with the cache and without it disagree: the cache is wrong")
    out["cache_speedup"] = out["greedy_cache"]["out_tokens_per_s"] / out["greedy_recompute"]["out_tokens_per_s"]
    out["beam4_cost"] = out["greedy_cache"]["out_tokens_per_s"] / out["beam4_cache"]["out_tokens_per_s"]
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--params", type=int, default=400_000, help="parameter budget of the training comparison")
    ap.add_argument("--vocab", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--src-len", dest="src_len", type=int, default=40)
    ap.add_argument("--tgt-len", dest="tgt_len", type=int, default=40)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--d-model", dest="d_model", type=int, default=256)
    ap.add_argument("--out-len", dest="out_len", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes (seconds), nothing written unless --out is given")
    ap.add_argument("--out", default=None, help="JSON path (default benchmarks/results/seq2seq_speed.json; --smoke: none)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.params, args.vocab, args.batch, args.src_len, args.tgt_len = 20_000, 50, 4, 8, 6
        args.steps, args.d_model, args.out_len, args.repeats = 2, 32, 8, 1
    torch.set_num_threads(1)
    results = {
        "env": {"torch": torch.__version__, "python": platform.python_version(), "threads": torch.get_num_threads(), "platform": platform.platform(),
                "loadavg_1min_at_start": __import__("os").getloadavg()[0]},  # > 0 on a 2-core machine: other jobs shared it
        "config": {k: v for k, v in vars(args).items() if k not in ("out",)},
        "training": bench_training(args),
        "decoding": bench_decoding(args),
    }
    out = args.out or (None if args.smoke else str(RESULTS / "seq2seq_speed.json"))
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        record(Path(out), results)
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
