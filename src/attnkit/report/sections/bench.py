"""Pieces of the cost section: the quick backend benchmark's rows, and the committed full ("must") results.

The quick suite (n = 2,048, fp32, ~30 s on 2 cores) shows the shape of the story: SDPA wins on
plain and causal attention, the blockwise backend wins once a mask or bias has to be a dense
tensor. The headline numbers at 8k-16k come from ``attnkit bench`` (``--suite must``), which takes
tens of minutes, so the report quotes its committed JSON instead of rerunning it.
"""

from __future__ import annotations

from pathlib import Path

from ...experiments.lab.committed import committed
from ...page.html import esc, png_img, table


def _quick_rows(result: dict) -> list[list[object]]:
    rows = [r for r in result["rows"] if "median_ms" in r]
    sdpa = {(r["mask"], r["bias"]): r["median_ms"] for r in rows if r["backend"] == "sdpa"}
    out = []
    for r in rows:
        base = sdpa.get((r["mask"], r["bias"]))
        ratio = f"{base / r['median_ms']:.2f}×" if base and r["backend"] != "sdpa" else "–"
        out.append([f"{r['mask']}/{r['bias']}", r["backend"], r["chosen"], f"{r['median_ms']:.1f}",
                    f"{r['peak_mib']:.1f}", ratio])
    return out


def _memory_ratio(r: float) -> str:
    """blockwise/SDPA peak: "1/34" when blockwise is smaller, "3.8×" when larger."""
    return f"1/{1 / r:.0f}" if 0 < r < 1 else f"{r:.1f}×"


def _headline(summary: dict) -> str:
    rows = []
    names = {"window256_16k_fp32": "sliding window 256, n=16k, fp32", "alibi_8k_fp32": "ALiBi, n=8k, fp32",
             "t5_8k_fp32": "T5 bias, n=8k, fp32", "bf16_dense_4k": "no mask, n=4k, bf16"}
    for key, label in names.items():
        s = summary.get(key)
        if s:
            rows.append([label, f"{s['sdpa_ms']:.0f}", f"{s['blockwise_ms']:.0f}", f"{s['speedup']:.2f}×",
                         f"{s['sdpa_peak_mib']:.0f}", f"{s['blockwise_peak_mib']:.1f}", _memory_ratio(s["memory_ratio"])])
    html = table(["call", "SDPA ms", "blockwise ms", "speedup", "SDPA peak MiB", "blockwise peak MiB", "blockwise/SDPA memory"], rows)
    tw = summary.get("train_window_peak_mib", {})
    if tw.get("blockwise"):
        html += "<p>Forward+backward with a sliding window, peak MiB above inputs: " + esc(
            ", ".join(f"n={n}: blockwise {v:.1f} / SDPA {tw.get('sdpa', {}).get(n, float('nan')):.1f}" for n, v in tw["blockwise"].items())) + "</p>"
    if summary.get("linear_faster_from_n"):
        html += f"<p>Causal linear attention is faster than SDPA causal from n = {esc(summary['linear_faster_from_n'])}.</p>"
    return html


def _sweep(result: dict, root: Path | None = None) -> str:
    """The whole sweep (n × dtype × mask × bias) as the grid PNG, and how often auto chose well."""
    from ...bench import auto_choices

    a = result.get("auto_choices") or auto_choices(result["rows"])
    html = (f"<h3>The whole sweep (committed <code>attention_full.json</code>: "
            f"{sum('median_ms' in r for r in result['rows'])} measurements, "
            f"{sum('skipped' in r for r in result['rows'])} skipped with their reason, {result['wall_s'] / 60:.0f} min)</h3>"
            f"<p><code>auto</code> chose the backend that measured fastest in {a['chose_fastest']} of {a['configs']} "
            f"configurations, and one within 1.10× of it in {a['within_1_10']}.")
    if a["misses"]:
        html += " Misses: " + esc("; ".join(
            f"n={m['n']} {m['dtype']} {m['mask']}/{m['bias']}: chose {m['chosen']}, {m['chosen_over_fastest']:.2f}× the fastest ({m['fastest']})"
            for m in a["misses"])) + "."
    html += "</p>"
    png = committed("attention_full.png", root)
    return html + (png_img(png, "full sweep") if png else "")
