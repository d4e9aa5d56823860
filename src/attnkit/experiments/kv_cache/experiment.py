"""``kv_cache``: why text generation keeps a cache of keys and values, and how much it saves.

Measured (one thread, a few seconds): a toy decoder at the shape of the committed benchmark (width
512, 8 heads, RoPE, fp32, batch 1, untrained: the speed does not depend on the weights) generates
greedily after an 8-token prompt with a dynamic cache, a static cache, and recomputing the whole
prefix at every step; tokens per second of each, and whether the three produced the same tokens.
Quoted at render time: the committed 1,024-token benchmark (``decoding.json`` of
``benchmarks/decoding.py``) from the folder of committed benchmark results the run names, its figure
drawn from the JSON beside the page in English and Chinese (:mod:`.plots`).

Shapes: prompt (B=1, 8) tokens; generated (B=1, 8 + n) tokens.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import torch

from ...page.html import details, figure, so_what, table
from ...page.i18n import tr
from ..lab.committed import committed
from ..lab.context import RunContext
from ..lab.registry import Experiment, register
from ..lab.results import Section
from ..lab.threads import threads
from .memory import measure as measure_memory
from .memory import memory_html
from .plots import decoding_png


def _tokens_per_s(fn, n: int) -> tuple[float, torch.Tensor]:
    t0 = time.perf_counter()
    toks = fn()
    return n / (time.perf_counter() - t0), toks


def _measure(ToyDecoder, n_tokens: int, layers: tuple[int, ...]) -> list[dict]:
    rows = []
    for n_layers in layers:
        torch.manual_seed(0)
        # the benchmark's shape (D=512, H=8, E=64, RoPE), untrained: the speed does not depend on the weights
        model = ToyDecoder(vocab_size=256, dim=512, num_heads=8, num_layers=n_layers, max_positions=n_tokens + 16).eval()
        prompt = torch.randint(0, 256, (1, 8))
        res = {}
        for kind in ("dynamic", "static", None):
            kw = {"max_len": n_tokens + 8} if kind == "static" else {}
            res[kind] = _tokens_per_s(lambda: model.generate(prompt, n_tokens, cache=kind, **kw), n_tokens)
        same = all(torch.equal(res[k][1], res[None][1]) for k in ("dynamic", "static"))
        rows.append({"layers": n_layers, "dynamic": res["dynamic"][0], "static": res["static"][0], "recompute": res[None][0], "same": same})
    return rows


def committed_decoding(root: str | Path | None, out_dir: str | Path | None = None) -> dict:
    """The committed 1,024-token decoding benchmark under ``root``: tokens per second per model and
    cache kind, and its figure's path; empty when ``root`` or ``decoding.json`` is missing. With
    ``out_dir``, the figure is drawn there from the JSON in both languages (:mod:`.plots`), else the
    committed English ``decoding.png`` is named."""
    path = committed("decoding.json", root)
    if path is None:
        return {}
    bench = json.loads(path.read_text(encoding="utf-8"))
    models = bench["models"]
    growth = [{"model": name.replace("_layer", " layers").replace("1 layers", "1 layer"), "first": m["dynamic"]["per_token_ms_first_eighth_median"],
               "last": m["dynamic"]["per_token_ms_last_eighth_median"], "tokens": len(m["dynamic"].get("per_token_ms") or [])}
              for name, m in models.items() if "per_token_ms_last_eighth_median" in m.get("dynamic", {})]
    rows = [{"model": name, **{k: v["tokens_per_s"] for k, v in m.items() if isinstance(v, dict) and "tokens_per_s" in v}}
            for name, m in models.items()]
    per_token = any(isinstance(v, dict) and v.get("per_token_ms") for m in models.values() for v in m.values())
    png = decoding_png(bench, out_dir) if out_dir is not None and per_token else committed("decoding.png", root)
    return {"committed": rows, "committed_png": str(png.resolve()) if png else None, "growth": growth}


GROWS = 1.1  # a last-eighth step at least 10 % slower than a first-eighth one is called growth


def _model_zh(name: str) -> str:
    """A benchmark model's name on the Chinese page ("4 layers" -> "4 层")."""
    return re.sub(r"(\d+) layers?", r"\1 层", name)


def _model_name(key: str, lang: str) -> str:
    """A benchmark model's key ("4_layer") in the page's language: "4 layer" or "4 层"."""
    name = key.replace("_", " ")
    return _model_zh(name) if lang == "zh" else name


def growth_sentence(growth: list[dict] | None, lang: str) -> str:
    """The committed benchmark's median step time with the cache, early and late in a 1,024-token
    generation, per model, and what it shows: growth with t, or a step dominated by its fixed work."""
    if not growth:
        return ""
    sep = "; " if lang == "en" else "；"
    nums = sep.join(tr(lang, f"{g['model']}: {g['first']:.2f} ms in the first eighth, {g['last']:.2f} ms in the last ({100 * (g['last'] / g['first'] - 1):+.0f} %)",
                       f"{_model_zh(g['model'])}：前八分之一 {g['first']:.2f} 毫秒，最后八分之一 {g['last']:.2f} 毫秒（{100 * (g['last'] / g['first'] - 1):+.0f} %）")
                    for g in growth)
    grew = [g for g in growth if g["last"] >= GROWS * g["first"]]
    n = growth[0]["tokens"]
    tail = (tr(lang, "Where it grew, that is each step's attention reading one more cached key per token; where it did not, the step's "
                     "fixed work (projections, MLP: the same at every step) dominated at this length and the attention's growth is "
                     "inside the timing noise of a shared machine.",
               "有增长的，是每一步的注意力每多一个词元就多读一个已缓存的键；没有增长的，是在这个长度上每一步的固定工作（投影、MLP，每一步都一样）"
               "占了主导，注意力的增长淹没在共享机器的计时噪声里。") if grew and len(grew) < len(growth) else
            tr(lang, "The step time grew with t: each step's attention reads every cached key.",
               "每步时间随 t 增长：每一步的注意力都要读所有已缓存的键。") if grew else
            tr(lang, "At this length the step's fixed work (projections, MLP) dominated and attention's growth with t stayed inside "
                     "the timing noise; it still reads every cached key, which is what shows at longer contexts.",
               "在这个长度上，每一步的固定工作（投影、MLP）占了主导，注意力随 t 的增长淹没在计时噪声里；但它仍要读所有已缓存的键，"
               "上下文更长时就会显现出来。"))
    return "<p>" + tr(lang, f"With the cache the step time is not a constant by construction. The committed benchmark's median step over "
                            f"{n:,} generated tokens — {nums}. ",
                      f"有缓存时，每步时间并不是按设计就保持不变的。已提交基准测试在生成 {n:,} 个 token 时的每步中位时间——{nums}。") + tail + "</p>"


@register
class KVCache(Experiment):
    name = "kv_cache"
    help = "greedy decoding with a dynamic or static KV cache against recomputing the prefix: tokens/s, same tokens"
    # bench_results: the folder of committed benchmark results quoted beside the measurement (the report sets its own)
    quick = {"tokens": 128, "layers": [1, 4], "threads": 1, "bench_results": "benchmarks/results"}
    full = quick
    tiny = {"tokens": 16, "layers": [1], "memory_tokens": 64}
    seeds = 1
    title = ("The KV cache", "KV 缓存")
    question = ("Why does text generation keep a cache of keys and values, and how much does it save?", "为什么文本生成要缓存键和值？能省多少？")
    how_to_read = ("The table: the cache's memory, measured and by the formula, for multi-head, grouped-query and multi-query "
                   "attention, with MLA's formula. The figure: milliseconds per generated token against its position, with the cache "
                   "and recomputing the whole prefix (lower is better).",
                   "表：缓存的内存，实测值与公式值，分别对应多头、分组查询和多查询注意力，以及 MLA 的公式值。"
                   "图：每生成一个 token 的毫秒数随其位置的变化，有缓存与每步重算整个前缀两种（越低越好）。")
    report_order = 70  # after positions (60), before vision (80)
    lesson = "09_kv_cache"
    est_s = {"quick": 10, "tiny": 2}
    run_in_report = True

    def run(self, ctx: RunContext) -> dict:
        from ...models.toy_decoder import ToyDecoder

        c = ctx.config
        n_tokens, n_threads = int(c["tokens"]), int(c["threads"])
        # one thread: on a shared 2-core machine two threads made this measurement take 6 minutes instead of 20 s
        with threads(n_threads):
            rows = _measure(ToyDecoder, n_tokens, tuple(int(n) for n in c["layers"]))
            memory = measure_memory(int(c.get("memory_tokens", 1024)))
        return {"n_tokens": n_tokens, "threads": n_threads, "rows": rows, "memory": memory, "bench_results": c.get("bench_results")}

    def report(self, results, out_dir, lang: str = "en", full_results=None) -> Section:
        # the committed benchmark: read now, its figure drawn beside the page in both languages
        data = {**results, **committed_decoding(results.get("bench_results"), Path(out_dir) / "figures" / self.name)}
        return Section(self.heading(lang), render(data, lang))

    def summary(self, results, lang: str = "en", full_results=None):
        best = max(results["rows"], key=lambda r: r["layers"])
        x = best["dynamic"] / best["recompute"]
        same = all(r["same"] for r in results["rows"])
        return (tr(lang, f"KV cache {x:.1f}× faster at {results['n_tokens']} tokens, same tokens: {'yes' if same else 'no'}",
                   f"{results['n_tokens']} 个 token 时 KV 缓存快 {x:.1f} 倍，输出相同：{'是' if same else '否'}"),
                tr(lang, "a cache turns each step's work from recomputing t positions into attending over t cached ones",
                   "有缓存时，每一步从重算 t 个位置变为只对 t 个已缓存的位置做注意力"))


def render(data: dict, lang: str) -> str:
    """The section's prose and tables from a run's numbers ``data`` (with the committed benchmark's, when found)."""
    rows, n = data["rows"], data["n_tokens"]
    best = max(rows, key=lambda r: r["layers"])
    same = all(r["same"] for r in rows)
    html = "<p>" + tr(
        lang,
        f"Measured now with one thread: a toy decoder (width 512, 8 heads, RoPE, fp32, batch 1, untrained — speed does not depend on the weights) "
        f"generated {n} tokens greedily after an 8-token prompt. With {best['layers']} layer(s) the cache produced "
        f"{best['dynamic']:.0f} tokens/s against {best['recompute']:.1f} tokens/s when the whole prefix is recomputed at every step: "
        f"{best['dynamic'] / best['recompute']:.1f}× faster, and the tokens were {'identical' if same else 'NOT identical'}. "
        "With a cache each new query attends to keys and values stored from earlier steps (O(1) new projections per step); "
        "without, step t recomputes all t positions.",
        f"本次单线程实测：一个玩具解码器（宽 512，8 个头，RoPE，fp32，batch 1，未训练——速度与权重无关）在 8 个 token 的提示后贪心生成 {n} 个 token。"
        f"{best['layers']} 层时，缓存每秒生成 {best['dynamic']:.0f} 个 token，而每一步重算整个前缀只有 {best['recompute']:.1f} 个/秒："
        f"快 {best['dynamic'] / best['recompute']:.1f} 倍，生成的 token {'完全相同' if same else '不相同'}。"
        "有缓存时，每个新查询只需关注之前步骤存下的键和值（每步只做 O(1) 次新投影）；没有缓存时，第 t 步要重算全部 t 个位置。",
    ) + "</p>"
    speed = table([tr(lang, "layers", "层数"), tr(lang, "dynamic cache tok/s", "动态缓存 token/秒"), tr(lang, "static cache tok/s", "静态缓存 token/秒"),
                   tr(lang, "recompute tok/s", "重算 token/秒"), tr(lang, "speedup (dynamic / recompute)", "加速比（动态/重算）"),
                   tr(lang, "same tokens", "token 相同")],
                  [[r["layers"], f"{r['dynamic']:.0f}", f"{r['static']:.0f}", f"{r['recompute']:.1f}", f"{r['dynamic'] / r['recompute']:.1f}×",
                    tr(lang, "yes", "是") if r["same"] else tr(lang, "NO", "否")] for r in rows])
    speed += "<p class='note'>" + tr(lang, "Columns: tokens generated per second; the dynamic cache grows with each token, the static one is "
                                          "allocated once for the maximum length.",
                                    "列说明：每秒生成的 token 数；动态缓存随每个 token 增长，静态缓存按最大长度一次性分配。") + "</p>"
    html += details(tr(lang, "Tokens per second at each depth, measured now", "各层数下每秒生成的 token 数（本次实测）"), speed)
    html += memory_html(data.get("memory") or [], lang)
    html += so_what(lang, tr(
        lang,
        "Generating text one token at a time only needs the new token's query; the keys and values of the earlier tokens do "
        "not change, so they are kept instead of recomputed. Each step then projects one token instead of t, but its attention "
        "still reads all t cached keys: the step's cost still grows with the text (linearly, where recomputing grows with t²), "
        "and the memory grows with it — 2 × T × kv_heads × E numbers per layer, which is why GQA, MQA and MLA shrink what is cached.",
        "逐个生成 token 时，只需要新 token 的查询；之前 token 的键和值不会改变，所以把它们保存下来而不是重算。"
        "这样每一步只需投影 1 个 token 而不是 t 个，但注意力仍要读全部 t 个已缓存的键：每步的成本仍随文本增长（线性增长，而重算是按 t² 增长），"
        "内存也随之增长——每层 2 × T × kv_heads × E 个数，这正是 GQA、MQA 和 MLA 要缩小缓存的原因。"))
    if data.get("committed"):
        more = table([tr(lang, "model", "模型"), tr(lang, "dynamic tok/s", "动态缓存 token/秒"), tr(lang, "static tok/s", "静态缓存 token/秒"),
                      tr(lang, "sdpa raw tok/s", "直接调用 sdpa token/秒"), tr(lang, "recompute tok/s", "重算 token/秒")],
                     [[_model_name(c["model"], lang), *(f"{c.get(k, float('nan')):.1f}" for k in ("dynamic", "static", "sdpa_raw", "recompute"))]
                      for c in data["committed"]])
        if data.get("committed_png") and Path(data["committed_png"]).is_file():
            html += growth_sentence(data.get("growth"), lang)
            html += figure(data["committed_png"], tr(lang, "per-token time by position", "按位置的每 token 时间"), lang)
        html += details(tr(lang, "1,024 tokens: tokens per second of each model (committed <code>decoding.json</code>)",
                           "1,024 个 token：各模型每秒生成的 token 数（已提交的 <code>decoding.json</code>）"), more)
    return html
