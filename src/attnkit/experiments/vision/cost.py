"""The cost paragraph of the vision report section: MHSA2d forward+backward time and peak memory at
the feature-map sizes of a 640-pixel detector input (20×20, 40×40, 80×80: P5, P4, P3), attnkit's
``auto`` backend against a naive softmax layer, in English or Chinese.

The numbers are read, when the section is rendered, from the committed benchmark JSON
``benchmarks/results/vision_cost.json`` written by ``benchmarks/vision_cost.py`` — relative to the
folder ``attnkit report`` runs in (a checkout), like the report's other committed benchmarks. Without
that file (a wheel install) the paragraph is left out; nothing here is typed in.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...page.html import esc
from ...page.i18n import tr as _tr


#: the committed MHSA2d cost benchmark, relative to the folder `attnkit report` runs in (a checkout)
COST_FILE = Path("benchmarks") / "results" / "vision_cost.json"


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def cost_sentences(cost: dict, lang: str = "en") -> list[str]:
    """MHSA2d forward+backward time and peak memory, attnkit's ``auto`` backend against the naive softmax
    layer, one sentence per feature-map size, from a ``benchmarks/vision_cost.py`` JSON (its ``rows``)."""
    rows = {(r["size"], r["impl"]): r for r in cost.get("rows", []) if "median_ms" in r and "peak_mib" in r}
    out = []
    for size in sorted({s for s, _ in rows}):
        a, n = rows.get((size, "auto")), rows.get((size, "naive"))
        if a is None or n is None:
            continue
        speed, mem = n["median_ms"] / a["median_ms"], n["peak_mib"] / a["peak_mib"]
        g, positions = f"{size}×{size}", f"{size * size:,}"
        out.append(_tr(lang,
                       f"For a {g} feature map (N = {positions} positions; C = {a['channels']}, {a['heads']} heads) one forward and "
                       f"backward pass took {_fmt(a['median_ms'])} ms and {_fmt(a['peak_mib'])} MiB above the inputs on attnkit's "
                       f"auto backend ({a['backend']}), against {_fmt(n['median_ms'])} ms and {_fmt(n['peak_mib'])} MiB for the naive "
                       f"softmax layer: {speed:.2f}× the speed, {mem:.1f}× less memory.",
                       f"在 {g} 的特征图上（N = {positions} 个位置；C = {a['channels']}，{a['heads']} 个头），一次前向加反向传播在 attnkit 的 "
                       f"auto 后端（{a['backend']}）上用时 {_fmt(a['median_ms'])} ms，输入之外占用 {_fmt(a['peak_mib'])} MiB；朴素 softmax "
                       f"实现用时 {_fmt(n['median_ms'])} ms，占用 {_fmt(n['peak_mib'])} MiB：速度是它的 {speed:.2f} 倍，内存只有它的 1/{mem:.1f}。"))
    return out


def cost_html(lang: str = "en", cost_file: str | Path | None = COST_FILE) -> str:
    """The cost paragraph from the committed benchmark JSON; "" when the file is absent or unreadable."""
    try:
        cost = json.loads(Path(cost_file).read_text(encoding="utf-8")) if cost_file is not None else None
    except (OSError, ValueError):
        cost = None
    sentences = cost_sentences(cost, lang) if isinstance(cost, dict) else []
    if not sentences:
        return ""
    first = next(r for r in cost["rows"] if r.get("impl") == "auto")
    intro = _tr(lang,
                f"What MHSA2d costs at the feature-map sizes of a 640-pixel detector input (P5, P4, P3), measured by "
                f"benchmarks/vision_cost.py ({esc(str(cost_file))}: {first.get('device', 'cpu')}, threads: {first.get('threads', '?')}, "
                f"median of {first.get('runs', '?')} runs, each size in a fresh process):",
                f"MHSA2d 在 640 像素检测器输入的特征图尺寸（P5、P4、P3）上的代价，由 benchmarks/vision_cost.py 测得"
                f"（{esc(str(cost_file))}：{first.get('device', 'cpu')}，{first.get('threads', '?')} 个线程，{first.get('runs', '?')} 次运行的中位数，"
                f"每个尺寸在新进程中测量）：")
    title = _tr(lang, "The cost of self-attention over pixels", "像素上的自注意力的代价")
    return f"<h3>{esc(title)}</h3><p>{intro}</p><ul>" + "".join(f"<li>{esc(s)}</li>" for s in sentences) + "</ul>"
