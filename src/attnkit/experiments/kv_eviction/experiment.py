"""``kv_eviction``: which keys and values a cache may drop, measured on a character LM trained here.

A small character-level decoder with rotary positions (:mod:`.model`) is trained on the King James
Bible at a short context, every training window beginning with the same BOS token at position 0
(:mod:`.data`). Then it reads a stream many times longer than that context one character at a
time, and each policy of :mod:`.policies` decides what the cache keeps: everything (dense), the
last ``w`` (window), the first 4 plus the last ``w - 4`` (sinks + window, StreamingLLM), H2O,
SnapKV, and sinks + window read back from 8- and 4-bit KIVI storage; and the window re-read from
scratch at every step (recompute). Per policy and budget: perplexity per bin of positions (the
shape of StreamingLLM's Figure 3), the last bin's perplexity, the bytes held; plus how much
attention each layer puts on position 0 (the sink).

``--data FILE`` evaluates on a user's text (characters the Bible lacks read as UNK); the model is
still trained on the Bible. Training is cached per seed under ``out/checkpoints`` (``--resume``).

Shape legend: streams (B, T) ids; per-seed NLL (B, T-1); curves (T-1) / bin_size bins.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from pathlib import Path

import torch

from ...page.figures import draw_both
from ..lab.atomic import save_torch
from ..lab.context import RunContext
from ..lab.registry import Experiment, register
from ..lab.results import Section
from ..lab.threads import threads
from . import plots
from .data import CharVocab, bible_texts, eval_streams
from .evaluate import binned, recompute_nll, sink_share, stepwise_nll
from .policies import Policy
from .train import train_seed

SINKS = 4  # StreamingLLM keeps 4 initial tokens


def policies(b: int, c: dict) -> dict[str, tuple[Policy, int]]:
    """Every evicting policy at budget ``b``: name → (rule, SnapKV's observation window)."""
    q = {"budget": b, "sinks": SINKS, "recent": c["residual"], "group": c["group"]}
    return {
        "window": (Policy("window", budget=b), 1),
        "sink_window": (Policy("sink_window", budget=b, sinks=SINKS), 1),
        "h2o": (Policy("h2o", budget=b, recent=b // 2), 1),
        "snapkv": (Policy("snapkv", budget=b, recent=b // 4, kernel=c["kernel"]), b // 4),
        "quantized8": (Policy("quantized", bits=8, **q), 1),
        "quantized4": (Policy("quantized", bits=4, **q), 1),
    }


def _stats(xs: list[float]) -> dict:
    return {"mean": statistics.fmean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else 0.0, "per_seed": xs}


def _evaluate_seed(model, streams, c: dict, headline: int, log) -> dict:
    """{policy: {budget: {"nll", "nbytes", "max_kept", "time_s"}}} and the kept-position traces."""
    B, T = streams.shape
    out: dict = {"dense": {}, "window_recompute": {}}
    traces = {}
    t0 = time.perf_counter()
    d = stepwise_nll(model, streams, Policy("dense"))
    out["dense"]["all"] = {"nll": d["nll"], "nbytes": d["nbytes"] // B, "max_kept": d["max_kept"], "time_s": time.perf_counter() - t0}
    for b in c["budgets"]:
        t0 = time.perf_counter()
        nll = recompute_nll(model, streams, b)
        out["window_recompute"][str(b)] = {"nll": nll, "nbytes": d["nbytes"] // B * b // (T - 1), "max_kept": b,
                                           "time_s": time.perf_counter() - t0}
        for name, (pol, obs) in policies(b, c).items():
            t0 = time.perf_counter()
            r = stepwise_nll(model, streams, pol, obs=obs, trace_steps=c["trace_steps"] if b == headline else 0)
            out.setdefault(name, {})[str(b)] = {"nll": r["nll"], "nbytes": r["nbytes"] // B, "max_kept": r["max_kept"],
                                                "time_s": time.perf_counter() - t0}
            if r["trace"]:
                traces[name] = r["trace"]
        log(f"  budget {b}: " + ", ".join(f"{n} {math.exp(float(v[str(b)]['nll'][:, -c['bin_size']:].mean())):.2f}"
                                          for n, v in out.items() if str(b) in v))
    return {"runs": out, "traces": traces}


def _evaluate_cached(ctx: RunContext, seed: int, model, streams, c: dict) -> tuple[dict, float]:
    """:func:`_evaluate_seed`'s result and its seconds, from ``checkpoints/eval-seed{seed}.pt`` under
    ``--resume`` when it was written for this very config (a killed run redoes no finished seed)."""
    path = ctx.out / "checkpoints" / f"eval-seed{seed}.pt"
    key = json.dumps(c, sort_keys=True, default=str)
    if ctx.resume and path.exists():
        saved = torch.load(path, weights_only=False)
        if saved.get("key") == key:
            ctx.log(f"seed {seed}: evaluation restored from {path.name}")
            return saved["result"], saved["eval_s"]
    t0 = time.perf_counter()
    result = _evaluate_seed(model, streams, c, c["headline_budget"], ctx.log)
    eval_s = time.perf_counter() - t0
    path.parent.mkdir(parents=True, exist_ok=True)
    save_torch(path, {"key": key, "result": result, "eval_s": eval_s})
    return result, eval_s


def _aggregate(per_seed: list[dict], c: dict) -> dict:
    """Mean ± std over seeds of every curve and last-bin perplexity."""
    bs = c["bin_size"]
    agg: dict = {}
    for name, by_budget in per_seed[0]["runs"].items():
        agg[name] = {}
        for b, first in by_budget.items():
            curves = [binned(s["runs"][name][b]["nll"], bs) for s in per_seed]
            agg[name][b] = {
                "curve_nats": {"mean": [statistics.fmean(col) for col in zip(*curves)],
                               "std": [statistics.stdev(col) if len(col) > 1 else 0.0 for col in zip(*curves)],
                               "per_seed": curves},
                "last_bin_ppl": _stats([math.exp(cv[-1]) for cv in curves]),
                "nbytes": first["nbytes"], "max_kept": first["max_kept"],
                "time_s": _stats([s["runs"][name][b]["time_s"] for s in per_seed]),
            }
    return agg


#: Gu et al. 2025 (https://arxiv.org/abs/2410.10781) count a head as a sink head when its mean
#: weight on the first token is above this threshold (their metric Sink_1^eps, eps = 0.3)
SINK_EPS = 0.3


def _sink(models, windows) -> dict:
    shares = [sink_share(m, windows) for m in models]
    n_layers = len(shares[0]["layers"])
    firsts = [[s["layers"][i]["first_mean"] for s in shares] for i in range(n_layers)]
    heads = [[h for layer in s["layers"] for h in layer["per_head"]] for s in shares]  # per seed: every head
    return {"uniform_first": shares[0]["uniform_first"], "first_mean": [statistics.fmean(f) for f in firsts],
            "sink_heads_frac_per_seed": [sum(h > SINK_EPS for h in hs) / len(hs) for hs in heads],
            "max_head_first_per_seed": [max(hs) for hs in heads],
            "first_std": [statistics.stdev(f) if len(f) > 1 else 0.0 for f in firsts], "first_per_seed": firsts,
            "per_head_seed0": [layer["per_head"] for layer in shares[0]["layers"]],
            "maps_seed0": [[[round(w, 5) for w in row] for row in m] for m in shares[0]["maps"]]}  # 5 digits: a picture


@register
class KVEviction(Experiment):
    name = "kv_eviction"
    help = "KV-cache eviction and quantization (window, sinks, H2O, SnapKV, KIVI) on a char LM trained on the KJV Bible"
    quick = {"context": 64, "dim": 64, "heads": 4, "layers": 3, "windows": 9600, "epochs": 3, "batch_size": 32, "lr": 3e-3,
             "stream_len": 512, "streams": 4, "budgets": [16, 32], "headline_budget": 32, "bin_size": 32, "kernel": 5,
             "group": 8, "residual": 8, "trace_steps": 160, "data": None, "books": None}
    # full: the sink's best chances within a CPU budget: twice the context (sinks grow with it), a wider
    # model with more heads, 2.7x the characters seen (sinks follow sufficient training), same stream ratio
    full = {**quick, "context": 128, "batch_size": 16, "dim": 96, "heads": 8, "epochs": 4, "stream_len": 1024, "budgets": [32]}
    tiny = {"windows": 64, "epochs": 1, "dim": 32, "layers": 1, "stream_len": 96, "streams": 1, "budgets": [16],
            "headline_budget": 16, "bin_size": 16, "trace_steps": 20,
            "books": ["Ruth", "Jonah", "Philemon", "Jude"]}
    seeds = 3
    title = ("Compressing the KV cache: attention sinks, H2O, SnapKV, quantization", "压缩 KV 缓存：注意力汇点、H2O、SnapKV 与量化")
    question = ("A cache cannot keep every token of an endless stream: which ones can it drop, and why must it keep the first?",
                "缓存无法保留无尽文本流中的每个 token：哪些可以丢弃？为什么必须保留开头的那几个？")
    how_to_read = ("Bits per character against position: lower is better; a line that climbs after the training context "
                   "has lost something the model needs.",
                   "每字符比特数随位置变化：越低越好；在训练上下文之后上升的曲线，说明丢掉了模型需要的东西。")
    report_order = 75  # after kv_cache (70), before vision (80)
    lesson = "14_kv_compression"
    est_s = {"quick": 900, "tiny": 20}

    def add_arguments(self, parser):
        parser.add_argument("--data", default=None, metavar="TEXT_FILE",
                            help="evaluate on this UTF-8 text file instead of the Bible's held-out books (the model is still trained on the Bible)")

    def run(self, ctx: RunContext) -> dict:
        c = ctx.config
        t0, cpu0, load0 = time.perf_counter(), time.process_time(), os.getloadavg()
        with threads(1):  # one thread: the machine is shared, and small matrices gain little from two
            train, held_out, starts = bible_texts(ctx.out / "cache", c.get("books"))  # cache/: git ignores it
            vocab = CharVocab(train + held_out)
            text = Path(c["data"]).read_text(encoding="utf-8") if c.get("data") else held_out
            ids = vocab.encode(text)
            streams = eval_streams(ids, c["streams"], c["stream_len"])
            windows = eval_streams(ids, 16, c["context"])
            models, fits, per_seed = [], [], []
            for seed in ctx.seeds:
                model, fit = train_seed(ctx, seed, c, len(vocab), vocab.encode(train), starts)
                ctx.log(f"seed {seed}: train loss {fit['train_loss']:.3f} ({fit['time_s']:.0f} s); evaluating")
                result, eval_s = _evaluate_cached(ctx, seed, model, streams, c)
                per_seed.append(result)
                fits.append({**fit, "eval_s": eval_s})
                models.append(model)
            sink = _sink(models, windows)
        r = self._results(c, per_seed, fits, sink, ctx, text_name=c.get("data") or "KJV held-out books")
        # the wall time of this process and the machine's load around it: on a shared machine both matter
        r["seconds"] = round(time.perf_counter() - t0, 1)
        r["cpu_seconds"] = round(time.process_time() - cpu0, 1)  # what the run costs on an idle core
        r["load_avg"] = {"start": [round(x, 2) for x in load0], "end": [round(x, 2) for x in os.getloadavg()]}
        return r

    def _results(self, c, per_seed, fits, sink, ctx, text_name: str) -> dict:
        agg = _aggregate(per_seed, c)
        hb = str(c["headline_budget"])
        pick = {p: (agg[p].get("all") or agg[p][hb]) for p in agg}
        dense_curve = agg["dense"]["all"]["curve_nats"]["per_seed"]
        in_ctx = c["context"] // c["bin_size"]
        r = {
            "context": c["context"], "stream_len": c["stream_len"], "streams": c["streams"], "budgets": c["budgets"],
            "headline_budget": c["headline_budget"], "bin_size": c["bin_size"], "sinks": SINKS, "n_seeds": len(per_seed),
            "text": text_name, "perplexity_last_bin": {p: v["last_bin_ppl"]["mean"] for p, v in pick.items()},
            "perplexity_last_bin_std": {p: v["last_bin_ppl"]["std"] for p, v in pick.items()},
            "dense_in_context": _stats([math.exp(statistics.fmean(cv[:in_ctx])) for cv in dense_curve]),
            "policies": agg, "sink": sink, "trace": per_seed[0]["traces"], "train": fits,
            "times": {"train_s": [f["time_s"] for f in fits], "eval_s": [f["eval_s"] for f in fits]},
        }
        for fname, fig in (("perplexity_vs_position.png", plots.curves_figure), ("kept_positions.png", plots.kept_figure),
                           ("sink.png", plots.sink_figure), ("tradeoff.png", plots.tradeoff_figure)):
            draw_both(ctx.save_figure, fname, lambda lang, fig=fig: fig(r, lang))
        return r

    def report(self, results, out_dir, lang: str = "en", full_results=None) -> Section:
        from .section import render

        return Section(self.heading(lang), render(results, lang, full_results))

    def summary(self, results, lang: str = "en", full_results=None):
        from .section import summary

        return summary(results, lang)
