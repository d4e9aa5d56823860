"""``cost``: why dense attention is expensive for long inputs, what blockwise (Flash-style) computing
changes, the trade-off of linear attention, and what ``auto`` dispatch chose and why.

Measured (seconds; nothing is trained): the dense bytes attnkit reports for a call against the
formula B·H·n²·4, linear attention's error against exact softmax attention on random tokens, the
backend ``auto`` ran for nine typical calls with its reason; at the quick preset, when no committed
result of it is found, the quick backend benchmark (``attnkit bench --quick``, fresh processes,
1-1.5 min on 2 cores). Quoted at render time from the folder of committed benchmark results the run
names: the quick benchmark, the full comparison at 4k-16k tokens and the whole sweep
(``attention_quick.json``, ``attention.json``, ``attention_full.json`` of ``attnkit bench``); the
quick benchmark's and the sweep's figures are drawn from those JSON files in English and Chinese
(:mod:`.quick_figure`, :func:`attnkit.bench.plot.grid_figure`).

Shape legend: B batch, H heads, n = L = S sequence length, E feature size.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from ... import attention, linear_attention
from ...page.figures import draw_both, save_both
from ...page.html import details, figure, so_what, table
from ...page.i18n import tr
from ..lab.committed import committed
from ..lab.context import RunContext
from ..lab.registry import Experiment, register
from ..lab.results import Section
from .bench import headline, headline_html, quick_rows, sweep, sweep_html
from .calls import CALLS_ZH, example_calls, reason
from .quick_figure import call_name, quick_figure
from .tiling import tiling_figure
from .tiling import trace as tiling_trace

B, H, E = 1, 8, 64


def measure(linear_n: int, seed: int) -> dict:
    """The dense score matrix's bytes (attnkit's report at n = 256 and the formula per n), what
    ``auto`` ran for the typical calls and why, and linear attention's relative error on
    ``linear_n`` random tokens."""
    # 1. the (n, n) score matrix: what a dense call materializes, as attnkit's report states it
    q = torch.randn(B, H, 256, E)
    small = attention(q, q, q, backend="reference").report.materialized_bytes
    dense = [[n, B * H * n * n * 4] for n in (1024, 4096, 16384, 65536)]  # pairs: JSON keeps int n
    # 2. which backend auto picks for typical calls, and why
    L = 64
    qa = torch.randn(2, 4, L, 16)  # (B, H, L, E)
    auto = []
    for name, kw in example_calls(L):
        r = attention(qa, qa, qa, **kw).report
        auto.append({"call": name, "ran": r.backend, "why": r.reason, "bytes": r.materialized_bytes})
    # 3. linear attention's trade-off: an approximation of softmax, not a faster softmax
    g = torch.Generator().manual_seed(seed)
    ql, kl, vl = (torch.randn(1, 4, linear_n, 32, generator=g) for _ in range(3))
    return {"reference_bytes_256": small, "formula_256": B * H * 256 * 256 * 4, "dense": dense, "auto": auto,
            "linear_rel_err": linear_error(ql, kl, vl), "linear_n": linear_n, "tiling": tiling_trace(seed=seed)}


def linear_error(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> float:
    """‖linear − exact‖ / ‖exact‖: how far linear attention (elu + 1 features) lands from softmax
    attention on q (B, H, L, E), k, v (B, H, S, E)."""
    exact = attention(q, k, v, backend="reference").out  # (B, H, L, E)
    lin = linear_attention(q, k, v).out
    return float((lin - exact).norm() / exact.norm())


def quick_png(result: dict, out_dir: Path) -> Path:
    """The quick benchmark ``result`` drawn under ``out_dir`` in both languages (the Chinese copy in
    ``zh/`` when a CJK font is found), once per version of the result and of the figure's code."""
    from ...page.figures import cjk_font, save_both, zh_path

    code = Path(__file__).with_name("quick_figure.py").read_bytes()
    version = hashlib.sha256(json.dumps(result, sort_keys=True).encode() + code).hexdigest()[:12]
    png = Path(out_dir) / f"quick-{version}.png"
    if not png.is_file() or (cjk_font() is not None and not zh_path(png).is_file()):
        save_both(png, lambda lang: quick_figure(result, lang))
    return png


def committed_benchmarks(data: dict, root: str | Path | None, out_dir: Path) -> dict:
    """``data`` with the committed benchmark results under ``root`` the page quotes: the quick
    benchmark (unless this run measured it), the full comparison's headline and the whole sweep,
    its grid drawn under ``out_dir``."""
    data = dict(data)
    quick = committed("attention_quick.json", root)
    if "quick_rows" not in data and quick is not None:
        result = json.loads(quick.read_text(encoding="utf-8"))
        data["quick_rows"] = quick_rows(result)
        data["quick_source"] = "committed"
        if any("median_ms" in r for r in result["rows"]):  # drawn from the JSON in the page's two languages
            data["quick_png"] = str(quick_png(result, out_dir).resolve())
    full = committed("attention.json", root)
    if full is not None:
        data["committed_headline"] = headline(json.loads(full.read_text(encoding="utf-8")).get("summary", {}))
    whole = committed("attention_full.json", root)
    if whole is not None:
        data["committed_sweep"] = sweep(json.loads(whole.read_text(encoding="utf-8")), root, out_dir)
    return data


@register
class Cost(Experiment):
    name = "cost"
    help = "dense attention's n² memory, linear attention's error, what auto chose and why, and the backend benchmark"
    # measure_bench: run `attnkit bench --quick` when no committed result of it is found (1-1.5 min);
    # bench_results: the folder of committed benchmark results quoted beside the measurement (the report sets its own)
    quick = {"linear_n": 512, "measure_bench": True, "bench_results": "benchmarks/results"}
    full = quick
    tiny = {"linear_n": 128, "measure_bench": False}
    seeds = 1
    title = ("Cost and speed: quadratic, blockwise, linear", "成本与速度：二次方、分块、线性")
    question = ("Why is attention expensive for long inputs, and what do blockwise (Flash-style) and linear attention change?",
                "为什么注意力在长输入上代价高？分块（Flash 式）和线性注意力改变了什么？")
    how_to_read = (
        "The first table is memory for the dense score matrix; the benchmark plot shows measured time per backend (lower is "
        "better) and the tables say which backend auto chose and why.",
        "第一张表是稠密分数矩阵所需的内存；基准图给出各后端的实测时间（越低越好），表格说明 auto 选择了哪个后端以及原因。")
    report_order = 50  # after masks (40)
    lesson = "06_flash_online_softmax"
    est_s = {"quick": 5, "tiny": 2}
    run_in_report = True

    def run(self, ctx: RunContext) -> dict:
        c = ctx.config
        root = c.get("bench_results")
        data = {**measure(int(c["linear_n"]), ctx.seeds[0]), "bench_results": root}
        if c["measure_bench"] and committed("attention_quick.json", root) is None and ctx.is_main:
            from ...bench import run_bench

            res = run_bench(quick=True, out_dir=ctx.out / "bench", log=lambda *a: None)
            data["quick_rows"] = quick_rows(res)
            data["quick_source"] = "measured now"
            if any("median_ms" in r for r in res.get("rows", [])):  # drawn here in both languages (zh/ beside it)
                draw_both(ctx.save_figure, "quick_benchmark.png", lambda lang: quick_figure(res, lang))
                data["quick_png"] = "quick_benchmark.png"
        return data

    def report(self, results, out_dir, lang: str = "en", full_results=None) -> Section:
        data = dict(results)
        if data.get("quick_png") and data.get("quick_source") == "measured now":
            data["quick_png"] = str(Path(results.run_dir) / data["quick_png"])
        data = committed_benchmarks(data, results.get("bench_results"), Path(out_dir) / "figures" / self.name)
        if data.get("tiling"):  # drawn beside the page from the run's numbers, in both languages
            png = Path(out_dir) / "figures" / self.name / "online_softmax.png"
            data["tiling_png"] = str(save_both(png, lambda lg: tiling_figure(data["tiling"], lg))[0])
        return Section(self.heading(lang), render(data, lang))

    def summary(self, results, lang: str = "en", full_results=None):
        g = dict((int(n), b) for n, b in results["dense"])[16384] / 2**30
        err = 100 * results["linear_rel_err"]
        return (tr(lang, f"dense scores at n=16k: {g:.0f} GiB; linear attn error {err:.0f} %", f"n=16k 时稠密分数 {g:.0f} GiB；线性注意力误差 {err:.0f}%"),
                tr(lang, "dense is O(n²) memory; blockwise is exact in O(n); linear is an approximation",
                   "稠密为 O(n²) 内存；分块精确且 O(n)；线性是近似"))


def render(data: dict, lang: str) -> str:
    """The section's prose, tables and figures from a run's numbers ``data`` (with the committed benchmark's, when found)."""
    gib = {int(n): b / 2**30 for n, b in data["dense"]}
    ns = list(gib)
    html = "<p>" + tr(
        lang,
        f"Every query scores every key, so a dense call builds an n × n matrix per head: for B={B}, H={H} in fp32 that is "
        f"{gib[ns[0]]:.3f} GiB at n = {int(ns[0]):,} and {gib[ns[-1]]:.0f} GiB at n = {int(ns[-1]):,} — four times more for every doubling. "
        f"attnkit's own report says the same: the reference backend at n = 256 materialized {data['reference_bytes_256']:,} bytes "
        f"(the formula gives {data['formula_256']:,}). Blockwise (Flash-style) computing never builds that matrix: it walks over "
        "tiles of keys keeping a running max and sum of the softmax, so memory grows like n, and tiles that a mask hides are skipped. "
        f"Linear attention changes the maths instead: on n = {data['linear_n']} random tokens (q, k of std 1, E = 32, elu + 1 features) its "
        f"output differs from exact softmax attention by {100 * data['linear_rel_err']:.0f} % (relative norm) — linear cost, different "
        "answer; the linear-attention section shows how that error depends on the scores' sharpness.",
        f"每个查询都要给每个键打分，所以稠密注意力每个头要构造一个 n × n 矩阵：B={B}、H={H}、fp32 时，n = {int(ns[0]):,} 需要 "
        f"{gib[ns[0]]:.3f} GiB，n = {int(ns[-1]):,} 需要 {gib[ns[-1]]:.0f} GiB——n 每翻一倍，内存变为四倍。attnkit 自己的报告也这样说："
        f"reference 后端在 n = 256 时物化了 {data['reference_bytes_256']:,} 字节（公式给出 {data['formula_256']:,}）。分块（Flash 式）计算从不构造这个矩阵："
        "它逐块遍历键，同时维护 softmax 的运行最大值和运行和，因此内存随 n 线性增长，被掩码遮住的块直接跳过。"
        f"线性注意力改变的是数学本身：在 n = {data['linear_n']} 个随机 token 上（q、k 标准差为 1，E = 32，elu + 1 特征），它的输出与精确 softmax 注意力相差 "
        f"{100 * data['linear_rel_err']:.0f} %（相对范数）——成本是线性的，但答案不同；“线性注意力”一节给出这个误差如何随分数的尖锐程度变化。",
    ) + "</p>"
    html += table([tr(lang, "n", "n"), tr(lang, "dense scores, GiB (B=1, H=8, fp32)", "稠密分数矩阵 GiB（B=1，H=8，fp32）")],
                  [[f"{int(n):,}", f"{g:.3f}"] for n, g in gib.items()])
    html += tiling_html(data, lang)
    if data.get("quick_png"):
        html += figure(data["quick_png"], tr(lang, "quick benchmark", "快速基准测试"), lang)
        html += quick_reading(data.get("quick_rows") or [], lang)
    html += so_what(lang, tr(
        lang,
        "Long inputs are expensive because of the n × n score matrix, not because of the arithmetic of one score. Not building "
        "that matrix (blockwise here, and PyTorch's fused SDPA, which also tiles on CPU) removes the n² memory without changing "
        "the answer; blockwise wins over SDPA where SDPA is handed a dense mask or bias to read. Linear attention removes the "
        "quadratic time too, but computes a different function, so it is a modelling choice, not a free speed-up.",
        "长输入之所以昂贵，是因为 n × n 的分数矩阵，而不是单个分数的计算量。不构造这个矩阵（这里的分块实现，以及在 CPU 上同样分块的 PyTorch 融合 SDPA）"
        "就去掉了 n² 的内存，答案不变；分块实现胜过 SDPA 的地方，是 SDPA 需要读入一个稠密掩码或偏置的时候。"
        "线性注意力连二次方的时间也去掉了，但算的是另一个函数，所以它是建模上的选择，而不是免费的加速。"))
    html += details(tr(lang, "What <code>auto</code> chose for nine typical calls, and why", "<code>auto</code> 为九种典型调用选了哪个后端，为什么"),
                    _auto_table(data, lang))
    if "quick_rows" in data:
        html += details(tr(lang, "The quick benchmark, row by row", "快速基准测试的逐行数字"), _quick_table(data, lang))
    if data.get("committed_headline"):
        html += details(tr(lang, "The full comparison at 4k–16k tokens (committed results of <code>attnkit bench</code>)",
                           "4k–16k 个 token 的完整对比（已提交的 <code>attnkit bench</code> 结果）"),
                        headline_html(data["committed_headline"], lang) + _sweep_html(data, lang))
    return html


_PLAIN = {"none/none": ("no mask", "无掩码"), "causal/none": ("causal mask", "因果掩码"),
          "sliding256/none": ("sliding window of 256", "256 滑动窗口"), "none/alibi": ("ALiBi bias", "ALiBi 偏置")}


def _plain(call: str, lang: str) -> str:
    return _PLAIN[call][lang == "zh"] if call in _PLAIN else call_name(call, lang)


def tiling_html(data: dict, lang: str) -> str:
    """The online-softmax picture of Flash attention, with the numbers that show it is exact."""
    t, png = data.get("tiling"), data.get("tiling_png")
    if not t or not png:
        return ""
    n = len(t["scores"])
    text = tr(lang,
              f"How the blockwise (Flash-style) backend avoids the matrix: one query's {n} scores are read in tiles of {t['tile']}. "
              "It keeps only a running max m and a running sum l of exp(score − m); when a tile brings a larger max, what was summed "
              "so far is multiplied by exp(m_old − m_new) — the step where the green line barely rises. After the last tile m and l "
              f"equal the exact max and sum, and the output differs from exact softmax attention by {t['error_vs_exact']:.0e} and from "
              f"attnkit's blockwise backend by {t['error_vs_blockwise']:.0e} (float64).",
              f"分块（Flash 式）后端如何避开这个矩阵：一个查询的 {n} 个分数按每块 {t['tile']} 个读入。它只保留运行最大值 m 和 exp(分数 − m) 的运行和 l；"
              "当新的一块带来更大的最大值时，之前累加的和要乘以 exp(m_旧 − m_新)——绿线几乎不升的那一步就是这样。读完最后一块时，m 和 l "
              f"等于精确的最大值和和，输出与精确 softmax 注意力相差 {t['error_vs_exact']:.0e}，与 attnkit 的分块后端相差 {t['error_vs_blockwise']:.0e}（float64）。")
    return f"<p>{text}</p>" + figure(png, tr(lang, "online softmax, tile by tile", "逐块的在线 softmax"), lang)


def quick_reading(rows: list[list], lang: str) -> str:
    """What the quick benchmark's figure says about memory and about ``auto``, from its rows
    ``[mask/bias, backend, chosen, median ms, peak MiB, vs SDPA]``: blockwise's peak against SDPA's
    per call, and each ``auto`` row against the backend it picked (a gap larger than choosing costs
    is run-to-run spread: the choice itself took at most tens of microseconds, ``auto_overhead.json``)."""
    by = {(r[0], r[1]): r for r in rows}
    mem = [(call, float(by[(call, "blockwise")][4]), float(by[(call, "sdpa")][4])) for call in dict.fromkeys(r[0] for r in rows)
           if (call, "blockwise") in by and (call, "sdpa") in by]
    gaps = [(r[0], r[2], float(r[3]), float(by[(r[0], r[2])][3])) for r in rows if r[1] == "auto" and (r[0], r[2]) in by]
    if not mem and not gaps:
        return ""
    m_en = "; ".join(f"{_plain(c, 'en')}: blockwise {b:.1f} MiB, SDPA {s:.1f} MiB" for c, b, s in mem)
    m_zh = "；".join(f"{_plain(c, 'zh')}：分块 {b:.1f} MiB，SDPA {s:.1f} MiB" for c, b, s in mem)
    g_en = g_zh = ""
    if gaps:
        l_en = "; ".join(f"{_plain(c, 'en')}: auto ran {p} in {a:.1f} ms, {p} by name {d:.1f} ms" for c, p, a, d in gaps)
        l_zh = "；".join(f"{_plain(c, 'zh')}：auto 选了 {p}，{a:.1f} 毫秒，直接指定 {p} 为 {d:.1f} 毫秒" for c, p, a, d in gaps)
        g_en = (f" auto is not a backend of its own but a choice ({l_en}). Choosing costs at most tens of microseconds "
                "(auto_overhead.json), so gaps of milliseconds either way are not the choice's price: they come from the spread between "
                "separate runs (each row a median of 3 fresh processes on a shared machine) or from how the call reaches the kernel, "
                "which this benchmark does not tell apart.")
        g_zh = (f"auto 本身不是一个后端，而是一次选择（{l_zh}）。选择本身最多花几十微秒（auto_overhead.json），所以无论快慢、以毫秒计的差距都不是选择的代价，"
                "而是来自分别运行之间的波动（每一行是在共享机器上 3 个新进程的中位数），或来自调用到达内核的路径，这个基准测试没有把两者区分开。")
    return "<p>" + tr(lang, f"Peak memory at n = 2,048 ({m_en}). PyTorch's SDPA on CPU also works tile by tile, so on a plain or causal "
                            "call it needed less memory than blockwise here; blockwise's saving is against a call that must read a dense n × n mask or bias "
                            "(the sliding-window and ALiBi rows) and against the reference backend's full score matrix." + g_en,
                      f"n = 2,048 时的峰值内存（{m_zh}）。PyTorch 的 SDPA 在 CPU 上也是逐块计算的，所以在不带掩码或因果掩码的调用上，它在这里比分块实现占用的内存还少；"
                      "分块实现省下的，是那些必须读入稠密 n × n 掩码或偏置的调用（滑动窗口和 ALiBi 那几行），以及 reference 后端的完整分数矩阵。" + g_zh) + "</p>"


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
                        [[call_name(row[0], lang), *row[1:]] for row in data["quick_rows"]])


def _sweep_html(data: dict, lang: str) -> str:
    sweep = data.get("committed_sweep")
    if isinstance(sweep, dict):  # the numbers of the sweep, written in the page's language
        return sweep_html(sweep, lang, png=sweep.get("png"))
    return ""
