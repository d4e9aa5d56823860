"""Report section: cost and speed — why dense attention is quadratic, what blockwise (Flash-style)
computing changes, the trade-off of linear attention, and what ``auto`` dispatch chose and why.

Measured now: the dense bytes attnkit reports for each call, linear attention's error against exact
softmax, the quick backend benchmark (``attnkit bench --quick``, skipped at the tests' tiny size);
quoted: the committed full benchmark (``--bench-results`` folder, ``benchmarks/results`` of a checkout).

Shape legend: B batch, H heads, n = L = S sequence length, E feature size.
"""

from __future__ import annotations

import json
import re

import torch

from ... import attention, linear_attention
from ...experiments.lab.committed import committed
from ...page.html import details, figure, so_what, table
from ...page.i18n import tr
from ...page.story import SectionContext, StorySection
from ..cache import file_hash
from . import backends, bench
from .backends import _example_calls
from .bench import _headline, _quick_rows, _sweep

B, H, E = 1, 8, 64


def inputs(ctx: SectionContext) -> dict:
    return {n: file_hash(committed(n, ctx.bench_results))
            for n in ("attention.json", "attention_full.json", "attention_full.png", "attention_quick.json", "attention_quick.png")}


def compute(ctx: SectionContext) -> dict:
    # 1. the (n, n) score matrix: what a dense call materializes, as attnkit's report states it
    q = torch.randn(B, H, 256, E)
    small = attention(q, q, q, backend="reference").report.materialized_bytes
    dense = [[n, B * H * n * n * 4] for n in (1024, 4096, 16384, 65536)]  # pairs: JSON (the cache) keeps int n
    # 2. which backend auto picks for typical calls, and why
    L = 64
    qa = torch.randn(2, 4, L, 16)
    auto = []
    for name, kw in _example_calls(L):
        r = attention(qa, qa, qa, **kw).report
        auto.append({"call": name, "ran": r.backend, "why": r.reason, "bytes": r.materialized_bytes})
    # 3. linear attention's trade-off: an approximation of softmax, not a faster softmax
    g = torch.Generator().manual_seed(0)
    n = 512 if ctx.size == "quick" else 128
    ql, kl, vl = (torch.randn(1, 4, n, 32, generator=g) for _ in range(3))
    exact = attention(ql, kl, vl, backend="reference").out
    lin = linear_attention(ql, kl, vl).out
    lin_err = float((lin - exact).norm() / exact.norm())
    data = {"reference_bytes_256": small, "formula_256": B * H * 256 * 256 * 4, "dense": dense, "auto": auto,
            "linear_rel_err": lin_err, "linear_n": n, "_files": []}
    # 4. the quick benchmark (`attnkit bench --quick`): its committed result when the checkout has one, else measured
    #    now (subprocesses, 1-1.5 min on 2 cores: a seventh of the report's budget; the misconception on long
    #    sequences measures time against n in this run anyway)
    committed_quick = committed("attention_quick.json", ctx.bench_results)
    if committed_quick is not None:
        data["quick_rows"] = _quick_rows(json.loads(committed_quick.read_text()))
        data["quick_source"] = "committed"
        png = committed("attention_quick.png", ctx.bench_results)
        if png is not None:
            data["quick_png"] = str(png.resolve())
    elif ctx.size == "quick":
        from ...bench import run_bench

        d = ctx.dir("cost")
        res = run_bench(quick=True, out_dir=d / "bench", log=lambda *a: None)
        data["quick_rows"] = _quick_rows(res)
        data["quick_source"] = "measured now"
        png = d / "bench" / "attention_quick.png"
        if png.exists():
            data["quick_png"] = ctx.rel(png)
            data["_files"].append(ctx.rel(png))
    full = committed("attention.json", ctx.bench_results)
    if full is not None:
        data["committed_headline"] = _headline(json.loads(full.read_text()).get("summary", {}))
    sweep = committed("attention_full.json", ctx.bench_results)
    if sweep is not None:
        data["committed_sweep"] = _sweep(json.loads(sweep.read_text()), ctx.bench_results, ctx.dir("cost"))  # numbers; words at render
        data["_files"] += [ctx.rel(p) for p in ctx.dir("cost").rglob("sweep.png")]
    return data


CALLS_ZH = {"plain": "无掩码", "causal (L == S)": "因果（L == S）", "padding (lengths 40, 64)": "填充（长度 40、64）",
            "sliding window 16": "滑动窗口 16", "document ids": "文档编号", "ALiBi bias": "ALiBi 偏置",
            "causal + T5 bias": "因果 + T5 偏置", "additive (Bahdanau) score": "加性（Bahdanau）打分", "weights requested": "要求返回权重"}
_REASONS_ZH = ((r"lowest estimated time \(", "估计时间最短（"), (r"preferred and within ([0-9.]+)x of the fastest estimate \(", r"首选后端，且在最快估计的 \1 倍以内（"),
               (r"; path: Python tile loop", "；路径：Python 分块循环"), (r"; path: ", "；路径："), (r" ms", " 毫秒"), (r"\)$", "）"), (r", ", "，"))


def reason(text: str, lang: str) -> str:
    """attnkit's dispatch reason (English, from the call's report) in the page's language."""
    if lang != "zh":
        return text
    for pattern, repl in _REASONS_ZH:
        text = re.sub(pattern, repl, text)
    return text


def render(data: dict, ctx: SectionContext, lang: str) -> str:
    gib = {int(n): b / 2**30 for n, b in data["dense"]}
    ns = list(gib)
    html = "<p>" + tr(
        lang,
        f"Every query scores every key, so a dense call builds an n × n matrix per head: for B={B}, H={H} in fp32 that is "
        f"{gib[ns[0]]:.3f} GiB at n = {int(ns[0]):,} and {gib[ns[-1]]:.0f} GiB at n = {int(ns[-1]):,} — four times more for every doubling. "
        f"attnkit's own report says the same: the reference backend at n = 256 materialized {data['reference_bytes_256']:,} bytes "
        f"(the formula gives {data['formula_256']:,}). Blockwise (Flash-style) computing never builds that matrix: it walks over "
        "tiles of keys keeping a running max and sum of the softmax, so memory grows like n, and tiles that a mask hides are skipped. "
        f"Linear attention changes the maths instead: on n = {data['linear_n']} random tokens its output differs from exact "
        f"softmax attention by {100 * data['linear_rel_err']:.0f} % (relative norm) — linear cost, different answer.",
        f"每个查询都要给每个键打分，所以稠密注意力每个头要构造一个 n × n 矩阵：B={B}、H={H}、fp32 时，n = {int(ns[0]):,} 需要 "
        f"{gib[ns[0]]:.3f} GiB，n = {int(ns[-1]):,} 需要 {gib[ns[-1]]:.0f} GiB——n 每翻一倍，内存变为四倍。attnkit 自己的报告也这样说："
        f"reference 后端在 n = 256 时物化了 {data['reference_bytes_256']:,} 字节（公式给出 {data['formula_256']:,}）。分块（Flash 式）计算从不构造这个矩阵："
        "它逐块遍历键，同时维护 softmax 的运行最大值和运行和，因此内存随 n 线性增长，被掩码遮住的块直接跳过。"
        f"线性注意力改变的是数学本身：在 n = {data['linear_n']} 个随机 token 上，它的输出与精确 softmax 注意力相差 "
        f"{100 * data['linear_rel_err']:.0f}%（相对范数）——成本是线性的，但答案不同。",
    ) + "</p>"
    html += table([tr(lang, "n", "n"), tr(lang, "dense scores, GiB (B=1, H=8, fp32)", "稠密分数矩阵 GiB（B=1，H=8，fp32）")],
                  [[f"{int(n):,}", f"{g:.3f}"] for n, g in gib.items()])
    if data.get("quick_png"):
        html += figure(ctx.out / data["quick_png"], tr(lang, "quick benchmark", "快速基准测试"), lang)
    html += so_what(lang, tr(
        lang,
        "Long inputs are expensive because of the n × n score matrix, not because of the arithmetic of one score. An exact "
        "blockwise kernel removes the memory wall without changing the answer; linear attention removes the quadratic time too, "
        "but computes a different function, so it is a modelling choice, not a free speed-up.",
        "长输入之所以昂贵，是因为 n × n 的分数矩阵，而不是单个分数的计算量。精确的分块内核去掉了内存墙，答案不变；"
        "线性注意力连二次方的时间也去掉了，但算的是另一个函数，所以它是建模上的选择，而不是免费的加速。"))
    html += details(tr(lang, "What <code>auto</code> chose for nine typical calls, and why", "<code>auto</code> 为九种典型调用选了哪个后端，为什么"),
                    _auto_table(data, lang))
    if "quick_rows" in data:
        html += details(tr(lang, "The quick benchmark, row by row", "快速基准测试的逐行数字"), _quick_table(data, lang))
    if data.get("committed_headline"):
        html += details(tr(lang, "The full comparison at 4k–16k tokens (committed results of <code>attnkit bench</code>)",
                           "4k–16k 个 token 的完整对比（已提交的 <code>attnkit bench</code> 结果）"),
                        bench.headline_html(data["committed_headline"], lang) + _sweep_html(data, lang))
    return html


def _auto_table(data: dict, lang: str) -> str:
    return table([tr(lang, "call (B=2, H=4, L=S=64, E=16)", "调用（B=2，H=4，L=S=64，E=16）"), tr(lang, "backend that ran", "实际运行的后端"),
                  tr(lang, "why (attnkit's report)", "原因（attnkit 的报告）"), tr(lang, "dense bytes materialized", "物化的稠密字节数")],
                 [[tr(lang, r["call"], CALLS_ZH.get(r["call"], r["call"])), r["ran"], reason(r["why"], lang), f"{r['bytes']:,}"]
                  for r in data["auto"]])


def _quick_table(data: dict, lang: str) -> str:
    source = (tr(lang, "committed <code>attention_quick.json</code> of <code>attnkit bench --quick</code>",
                 "已提交的 <code>attnkit bench --quick</code> 结果 <code>attention_quick.json</code>")
              if data.get("quick_source") == "committed" else tr(lang, "measured now", "本次实测"))
    html = "<p>" + tr(lang, f"Source: {source}. B=1, H=8, E=64, n=2,048, fp32, median of 3 runs, each in a fresh process. Columns: mask/bias of the call; "
                            "backend measured; what auto chose for it; median time in ms; peak resident memory above the inputs in MiB; "
                            "speed relative to SDPA given the dense mask a user would build (>1× = faster).",
                      f"来源：{source}。B=1，H=8，E=64，n=2,048，fp32，3 次运行取中位数，每次在新进程中。列：调用的掩码/偏置；所测后端；auto 的选择；"
                      "中位时间（毫秒）；超出输入的峰值常驻内存（MiB）；相对 SDPA（使用用户会构造的稠密掩码）的速度（>1× 表示更快）。") + "</p>"
    return html + table([tr(lang, "mask/bias", "掩码/偏置"), tr(lang, "backend", "后端"), tr(lang, "chosen", "auto 的选择"),
                         tr(lang, "median ms", "中位毫秒"), tr(lang, "peak MiB", "峰值 MiB"), tr(lang, "speed vs SDPA", "相对 SDPA 的速度")],
                        data["quick_rows"])


def _sweep_html(data: dict, lang: str) -> str:
    sweep = data.get("committed_sweep")
    if isinstance(sweep, dict):  # the numbers of the sweep, written in the page's language
        return bench.sweep_html(sweep, lang, png=sweep.get("png"))
    return ""


def summary(data: dict, ctx: SectionContext, lang: str):
    g = dict((int(n), b) for n, b in data["dense"])[16384] / 2**30
    return (tr(lang, f"dense scores at n=16k: {g:.0f} GiB; linear attn error {100 * data['linear_rel_err']:.0f} %",
               f"n=16k 时稠密分数 {g:.0f} GiB；线性注意力误差 {100 * data['linear_rel_err']:.0f}%"),
            tr(lang, "dense is O(n²) memory; blockwise is exact in O(n); linear is an approximation",
               "稠密为 O(n²) 内存；分块精确且 O(n)；线性是近似"))


ORDER = 50  # its place in the report: after masks (40)


def section() -> StorySection:
    """This part of the report, with the question it answers and how to read its figure."""
    return StorySection(
        "cost", ("Cost and speed: quadratic, blockwise, linear", "成本与速度：二次方、分块、线性"),
        ("Why is attention expensive for long inputs, and what do blockwise (Flash-style) and linear attention change?",
         "为什么注意力在长输入上代价高？分块（Flash 式）和线性注意力改变了什么？"),
        ("The first table is memory for the dense score matrix; the benchmark plot shows measured time per backend (lower is "
         "better) and the tables say which backend auto chose and why.",
         "第一张表是稠密分数矩阵所需的内存；基准图给出各后端的实测时间（越低越好），表格说明 auto 选择了哪个后端以及原因。"),
        compute, render, (__name__, bench.__name__, backends.__name__), inputs=inputs, est_s={"quick": 5, "tiny": 2},
        summary=summary, order=ORDER,
        lesson="06_flash_online_softmax")
