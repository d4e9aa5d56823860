"""The cost section's benchmark pieces: the quick backend benchmark's rows, and the committed full
("must") results and sweep, read from the folder of committed benchmark results.

The quick suite (n = 2,048, fp32, ~30 s on 2 cores) shows the shape of the story: SDPA wins on
plain and causal attention, the blockwise backend wins once a mask or bias has to be a dense
tensor. The headline numbers at 8k-16k come from ``attnkit bench`` (``--suite must``), which takes
tens of minutes, so the report quotes its committed JSON instead of rerunning it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ...page.html import esc, figure, table
from ..lab.committed import committed


def quick_rows(result: dict) -> list[list[object]]:
    rows = [r for r in result["rows"] if "median_ms" in r]
    sdpa = {(r["mask"], r["bias"]): r["median_ms"] for r in rows if r["backend"] == "sdpa"}
    out = []
    for r in rows:
        base = sdpa.get((r["mask"], r["bias"]))
        ratio = f"{base / r['median_ms']:.2f}×" if base and r["backend"] != "sdpa" else "–"
        out.append([f"{r['mask']}/{r['bias']}", r["backend"], r["chosen"], f"{r['median_ms']:.1f}",
                    f"{r['peak_mib']:.1f}", ratio])
    return out


def memory_ratio(r: float) -> str:
    """blockwise/SDPA peak: "1/34" when blockwise is smaller, "3.8×" when larger."""
    return f"1/{1 / r:.0f}" if 0 < r < 1 else f"{r:.1f}×"


HEADLINE_CALLS = {"window256_16k_fp32": ("sliding window 256, n=16k, fp32", "滑动窗口 256，n=16k，fp32"),
                  "alibi_8k_fp32": ("ALiBi, n=8k, fp32", "ALiBi，n=8k，fp32"), "t5_8k_fp32": ("T5 bias, n=8k, fp32", "T5 偏置，n=8k，fp32"),
                  "bf16_dense_4k": ("no mask, n=4k, bf16", "无掩码，n=4k，bf16")}


def headline(summary: dict) -> dict:
    """The numbers of the committed full benchmark's summary that the page quotes (JSON-able)."""
    rows = [{"key": k, **{f: summary[k][f] for f in ("sdpa_ms", "blockwise_ms", "speedup", "sdpa_peak_mib", "blockwise_peak_mib", "memory_ratio")}}
            for k in HEADLINE_CALLS if summary.get(k)]
    return {"rows": rows, "train_window_peak_mib": summary.get("train_window_peak_mib", {}),
            "linear_faster_from_n": summary.get("linear_faster_from_n")}


def headline_html(h: dict, lang: str) -> str:
    """The committed full benchmark's headline table and sentences in ``lang``."""
    t = lambda en, zh: zh if lang == "zh" else en  # noqa: E731
    rows = [[HEADLINE_CALLS[r["key"]][lang == "zh"], f"{r['sdpa_ms']:.0f}", f"{r['blockwise_ms']:.0f}", f"{r['speedup']:.2f}×",
             f"{r['sdpa_peak_mib']:.0f}", f"{r['blockwise_peak_mib']:.1f}", memory_ratio(r["memory_ratio"])] for r in h["rows"]]
    html = table([t("call", "调用"), t("SDPA ms", "SDPA 毫秒"), t("blockwise ms", "blockwise 毫秒"), t("speedup", "加速比"),
                  t("SDPA peak MiB", "SDPA 峰值 MiB"), t("blockwise peak MiB", "blockwise 峰值 MiB"),
                  t("blockwise/SDPA memory", "blockwise/SDPA 内存比")], rows)
    tw = h.get("train_window_peak_mib") or {}
    if tw.get("blockwise"):
        pairs = [(n, v, tw.get("sdpa", {}).get(n, float("nan"))) for n, v in tw["blockwise"].items()]
        html += "<p>" + t("Forward+backward with a sliding window, peak MiB above inputs: " + esc(", ".join(
            f"n={n}: blockwise {b:.1f} / SDPA {d:.1f}" for n, b, d in pairs)),
            "滑动窗口下前向+反向传播、超出输入的峰值 MiB：" + esc("，".join(f"n={n}：blockwise {b:.1f} / SDPA {d:.1f}" for n, b, d in pairs))) + "</p>"
    if h.get("linear_faster_from_n"):
        n = esc(h["linear_faster_from_n"])
        html += "<p>" + t(f"Causal linear attention is faster than SDPA causal from n = {n}.",
                          f"从 n = {n} 起，因果线性注意力比 SDPA 因果注意力更快。") + "</p>"
    return html


def sweep(result: dict, root: str | Path | None = None, out: Path | None = None) -> dict:
    """The whole sweep's counts and how often auto chose well (JSON-able; words at render time);
    with ``out`` (a folder), its grid drawn for the page in both languages there, once per version
    of the sweep and of this file (else the committed PNG)."""
    from ...bench import auto_choices
    from ...bench.plot import grid_figure
    from ...page.figures import cjk_font, save_both, zh_path

    png = committed("attention_full.png", root)
    if out is not None:
        version = hashlib.sha256(json.dumps(result, sort_keys=True).encode() + Path(__file__).read_bytes()).hexdigest()[:12]
        png = Path(out) / f"sweep-{version}.png"
        if not png.is_file() or (cjk_font() is not None and not zh_path(png).is_file()):
            save_both(png, lambda lang: grid_figure(result, lang))
    return {"measured": sum("median_ms" in r for r in result["rows"]), "skipped": sum("skipped" in r for r in result["rows"]),
            "minutes": result["wall_s"] / 60, "auto": result.get("auto_choices") or auto_choices(result["rows"]),
            "png": str(png.resolve()) if png else None}


def sweep_html(d: dict, lang: str, png: str | None = None) -> str:
    """The whole sweep (n × dtype × mask × bias): a sentence in ``lang`` and the committed grid PNG."""
    a = d["auto"]
    if lang == "zh":
        html = (f"<h3>完整扫描（已提交的 <code>attention_full.json</code>：{d['measured']} 次测量，{d['skipped']} 个组合因所述原因跳过，"
                f"用时 {d['minutes']:.0f} 分钟）</h3><p>在 {a['configs']} 种配置中，<code>auto</code> 有 {a['chose_fastest']} 次选中了实测最快的后端，"
                f"{a['within_1_10']} 次选中的后端在最快者的 1.10 倍以内。")
        if a["misses"]:
            html += "未选中最快者的情况：" + esc("；".join(
                f"n={m['n']} {m['dtype']} {m['mask']}/{m['bias']}：选了 {m['chosen']}，是最快者（{m['fastest']}）的 {m['chosen_over_fastest']:.2f} 倍"
                for m in a["misses"])) + "。"
    else:
        html = (f"<h3>The whole sweep (committed <code>attention_full.json</code>: {d['measured']} measurements, "
                f"{d['skipped']} skipped with their reason, {d['minutes']:.0f} min)</h3>"
                f"<p><code>auto</code> chose the backend that measured fastest in {a['chose_fastest']} of {a['configs']} "
                f"configurations, and one within 1.10× of it in {a['within_1_10']}.")
        if a["misses"]:
            html += " Misses: " + esc("; ".join(
                f"n={m['n']} {m['dtype']} {m['mask']}/{m['bias']}: chose {m['chosen']}, {m['chosen_over_fastest']:.2f}× the fastest ({m['fastest']})"
                for m in a["misses"])) + "."
    html += "</p>"
    return html + (figure(png, "完整扫描" if lang == "zh" else "full sweep", lang) if png and Path(png).is_file() else "")
