"""Misconception: "attention handles long sequences". Time and memory versus n for dense attention
(the scores materialized: backend ``reference``; and PyTorch's fused SDPA), blockwise attention with
a sliding window, and linear attention — up to where dense scores no longer fit a stated budget.

Time is measured at small n only (the quick preset stops at 2,048; each point the median of a few
calls); memory is computed from attnkit's own report (``materialized_bytes``) at the measured n and
scaled by the formula of each method (dense: B·H·n²·4 bytes for the scores; window: B·H·n·w·4 per
tile row at most; linear: B·H·E·Ev·4 for the key-value summary). What each method gives up is
measured too: the share of full attention's weight a window drops, and linear attention's relative error.

Shape legend: B batch, H heads, n = L = S sequence length, E feature size, w window.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np
import torch

from ...page.figures import save_both
from ...page.html import details, figure, so_what, table
from ...page.i18n import tr
from ..lab.context import RunContext
from ..lab.registry import Experiment, register
from ..lab.results import Section
from ..lab.threads import threads

B, H, E = 1, 4, 32
BUDGET = 2 * 2**30  # the stated memory budget for the dense scores: 2 GiB


def _time(fn, repeats: int) -> float:
    fn()  # warm-up
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


@register
class MisconceptionLong(Experiment):
    name = "misconceptions_long"
    help = "misconception 'attention solves long sequences': time and memory vs n, dense vs window vs linear"
    quick = {"ns": [256, 512, 1024, 2048], "window": 128, "repeats": 3, "threads": 1}
    full = {"ns": [256, 512, 1024, 2048, 4096, 8192], "window": 128, "repeats": 5, "threads": None}
    tiny = {"ns": [64, 128], "repeats": 1}
    title = ("Misconception: attention by itself solves long sequences", "误解：注意力本身就能解决长序列问题")
    question = ("How do time and memory grow with length, and what do the scalable variants give up?",
                "时间和内存如何随长度增长？可扩展的变体放弃了什么？")
    how_to_read = (
        "Left: measured time per call versus n on log–log axes (slope 2 = quadratic, 1 = linear). Right: memory versus n "
        "from attnkit's reported bytes, with the stated budget as a dashed line.",
        "左图：每次调用的实测时间随 n 的变化（双对数坐标，斜率 2 = 二次，1 = 线性）。右图：由 attnkit 报告的字节数得到的内存随 n 的变化，虚线为设定的预算。")
    report_order = 130
    lesson = "07_linear_attention"  # the course lesson the report links under "Go deeper"
    est_s = {"quick": 5, "tiny": 8}
    run_in_report = True

    def run(self, ctx: RunContext) -> dict:
        with threads(ctx.config.get("threads")):
            return self._run(ctx)

    def _run(self, ctx: RunContext) -> dict:
        from ... import attention, linear_attention, masks

        c = ctx.config
        w = int(c["window"])
        window = masks.sliding_window(left=w // 2, right=w // 2)
        rows = []
        for n in c["ns"]:
            g = torch.Generator().manual_seed(n)
            q, k, v = (torch.randn(B, H, n, E, generator=g) for _ in range(3))
            calls = {
                "dense (scores materialized)": lambda: attention(q, k, v, backend="reference"),
                "dense SDPA (fused)": lambda: attention(q, k, v, backend="sdpa"),
                f"blockwise, window {w}": lambda: attention(q, k, v, mask=window, backend="blockwise"),
                "linear": lambda: linear_attention(q, k, v).out,
            }
            row = {"n": n, "ms": {}, "bytes": {}}
            for name, fn in calls.items():
                row["ms"][name] = _time(fn, int(c["repeats"]))
            row["bytes"]["dense (scores materialized)"] = attention(q, k, v, backend="reference").report.materialized_bytes
            exact = attention(q, k, v, backend="sdpa").out
            win = attention(q, k, v, mask=window, backend="blockwise").out
            row["rel_err"] = {"window": float((win - exact).norm() / exact.norm()),
                              "linear": float((linear_attention(q, k, v).out - exact).norm() / exact.norm())}
            # what the window drops: the share of full attention's weight that falls outside it (mean over queries)
            full_w = attention(q, k, v, backend="reference", return_weights=True).weights  # (B, H, n, n)
            inside = window.materialize(n, n)
            row["window_dropped_mass"] = float(1 - (full_w * inside).sum(-1).mean())
            rows.append(row)
            ctx.log(f"n={n}: " + ", ".join(f"{k} {v:.1f} ms" for k, v in row["ms"].items()))
        # memory model: dense scores grow as n², window as n·w, linear as E·Ev (+ the n·E inputs for all)
        n0 = rows[0]["n"]
        per_pair = rows[0]["bytes"]["dense (scores materialized)"] / (n0 * n0)
        ns_model = [2**p for p in range(8, 21)]
        memory = {"dense": [per_pair * n * n for n in ns_model], "window": [per_pair * n * (w + 1) for n in ns_model],
                  "linear": [B * H * E * E * 4 + 0 * n for n in ns_model], "inputs": [3 * B * H * n * E * 4 for n in ns_model]}
        dense_fits = max(n for n, m in zip(ns_model, memory["dense"]) if m <= BUDGET)
        exps = {name: float(np.polyfit(np.log([r["n"] for r in rows]), np.log([r["ms"][name] for r in rows]), 1)[0]) for name in rows[0]["ms"]}
        ctx.save_figure(_figure(rows, ns_model, memory, w), "long_sequences.png")
        return {"rows": rows, "window": w, "budget_bytes": BUDGET, "per_pair_bytes": per_pair, "ns_model": ns_model, "memory": memory,
                "dense_fits_up_to": dense_fits, "time_exponent": exps, "shape": {"B": B, "H": H, "E": E}, "figure": "long_sequences.png"}

    def report(self, results, out_dir, lang: str = "en", full_results=None) -> Section:

        r, w, ex = results["rows"], results["window"], results["time_exponent"]
        names = list(r[0]["ms"])
        last = r[-1]
        gib = results["budget_bytes"] / 2**30
        text = tr(lang,
                  f"Measured now at n = {r[0]['n']:,} … {last['n']:,} (B={B}, H={H}, E={E}, fp32). Fitting time ∝ n^k gives k = "
                  + ", ".join(f"{ex[k]:.2f} for {k}" for k in names)
                  + f". The dense scores need {results['per_pair_bytes']:.0f} bytes per (query, key) pair (4 bytes in each of the {H} heads), so a {gib:.0f} GiB budget holds them up "
                  f"to n = {results['dense_fits_up_to']:,} and no further. The fused SDPA kernel avoids storing them but still does n² work. "
                  f"The two methods that scale change the answer: at n = {last['n']:,} full attention put {100 * last['window_dropped_mass']:.0f} % "
                  f"of its weight outside the {w}-key window, which the window discards, and linear attention's output differs from exact "
                  f"attention by {100 * last['rel_err']['linear']:.0f} % (relative norm; elu + 1 on random q, k of std 1, the quantity the "
                  "linear-attention section measures against the scores' sharpness). "
                  "Long context needs a choice — what to drop (a window), what to approximate (linear), or more hardware.",
                  f"本次在 n = {r[0]['n']:,} … {last['n']:,}（B={B}，H={H}，E={E}，fp32）实测。按 时间 ∝ n^k 拟合得到 k = "
                  + "，".join(f"{method_zh(k)}：{ex[k]:.2f}" for k in names)
                  + f"。稠密分数每个 (查询, 键) 对需要 {results['per_pair_bytes']:.0f} 字节（{H} 个头各 4 字节），因此 {gib:.0f} GiB 的预算最多容纳到 n = "
                  f"{results['dense_fits_up_to']:,}。融合的 SDPA 内核不存储分数矩阵，但计算量仍是 n²。能扩展的两种方法都改变了答案："
                  f"在 n = {last['n']:,} 时，完整注意力有 {100 * last['window_dropped_mass']:.0f}% 的权重落在 {w} 个键的窗口之外，窗口把它们丢掉了；"
                  f"线性注意力的输出与精确注意力相差 {100 * last['rel_err']['linear']:.0f} %（相对范数；elu + 1，q、k 为标准差 1 的随机数，"
                  "即“线性注意力”一节随分数尖锐程度测量的那个量）。长上下文需要取舍——丢掉什么（窗口）、近似什么（线性），或者更多硬件。")
        png = save_both(Path(out_dir) / "figures" / self.name / results["figure"],
                        lambda lg: _figure(r, results["ns_model"], results["memory"], w, lg))[0]
        html = f"<p>{text}</p>" + figure(png, tr(lang, "time and memory versus n", "时间与内存随 n 的变化"), lang)
        html += so_what(lang, tr(lang, "Attention can read a long input in one step, but the price of exact attention grows with n²; "
                                       "every method that makes it cheaper either drops part of the context or answers a slightly "
                                       "different question.",
                                 "注意力可以一步读完很长的输入，但精确注意力的代价按 n² 增长；任何让它变便宜的方法，要么丢掉一部分上下文，"
                                 "要么回答的是一个略有不同的问题。"))
        rows = table(["n"] + [tr(lang, f"{k} ms", f"{method_zh(k)} 毫秒") for k in names] + [tr(lang, "weight outside the window", "窗口外的权重"), tr(lang, "linear rel. error", "线性相对误差")],
                      [[f"{x['n']:,}"] + [f"{x['ms'][k]:.1f}" for k in names] + [f"{100 * x['window_dropped_mass']:.0f} %", f"{100 * x['rel_err']['linear']:.0f} %"]
                       for x in r])
        rows += "<p class='note'>" + tr(lang, "Columns: median milliseconds per call on this machine; weight outside the window = the share of full attention's weight a window drops (mean over queries); relative error = ‖out − exact‖ / ‖exact‖ against full softmax attention.",
                                        "列说明：本机每次调用的中位毫秒数；窗口外的权重 = 窗口丢掉的完整注意力权重比例（对查询取平均）；相对误差 = ‖输出 − 精确值‖ / ‖精确值‖，以完整 softmax 注意力为准。") + "</p>"
        html += details(tr(lang, "Every length: time, dropped weight, error", "每个长度：时间、丢弃的权重、误差"), rows)
        return Section(self.heading(lang), html)

    def summary(self, results, lang: str = "en", full_results=None):
        gib = results["budget_bytes"] / 2**30
        return (tr(lang, f"dense scores fit a {gib:.0f} GiB budget up to n = {results['dense_fits_up_to']:,}",
                   f"{gib:.0f} GiB 预算下稠密分数最多到 n = {results['dense_fits_up_to']:,}"),
                tr(lang, "long context needs windows, approximations or hardware", "长上下文需要窗口、近似或硬件"))


METHODS_ZH = {"dense (scores materialized)": "稠密（物化分数矩阵）", "dense SDPA (fused)": "稠密 SDPA（融合内核）", "linear": "线性"}


def method_zh(name: str) -> str:
    """A method's name on the Chinese page (the window's size kept): one place, for prose, tables and figures alike."""
    return METHODS_ZH.get(name, name.replace("blockwise, window", "分块，窗口"))


def _figure(rows, ns_model, memory, w, lang: str = "en"):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    for name in rows[0]["ms"]:
        label = method_zh(name) if lang == "zh" else name
        a.plot([r["n"] for r in rows], [r["ms"][name] for r in rows], marker="o", label=label)
    a.set_xscale("log", base=2)
    a.set_yscale("log")
    a.set_xlabel(tr(lang, "sequence length n", "序列长度 n"))
    a.set_ylabel(tr(lang, "time per call (ms, median)", "每次调用时间（毫秒，中位数）"))
    a.set_title(tr(lang, "time, measured", "时间（实测）"))
    a.legend(fontsize=9)
    for key, label in (("dense", tr(lang, "dense scores", "稠密分数")), ("window", tr(lang, f"window {w}", f"窗口 {w}")),
                       ("linear", tr(lang, "linear (k·v summary)", "线性（k·v 汇总）")), ("inputs", tr(lang, "q, k, v themselves", "q、k、v 本身"))):
        b.plot(ns_model, np.asarray(memory[key]) / 2**20, label=label)
    b.axhline(BUDGET / 2**20, color="#b00", linestyle="--", label=tr(lang, f"budget {BUDGET / 2**30:.0f} GiB", f"预算 {BUDGET / 2**30:.0f} GiB"))
    b.set_xscale("log", base=2)
    b.set_yscale("log")
    b.set_xlabel(tr(lang, "sequence length n", "序列长度 n"))
    b.set_ylabel(tr(lang, "memory (MiB)", "内存（MiB）"))
    b.set_title(tr(lang, f"memory, from the report's bytes (B={B}, H={H}, E={E})", f"内存，按报告的字节数（B={B}，H={H}，E={E}）"))
    b.legend(fontsize=9)
    for ax in (a, b):
        ax.grid(True, alpha=0.3)
    return fig
