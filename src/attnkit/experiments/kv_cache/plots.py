"""The committed decoding benchmark's figure (``decoding.json`` of ``benchmarks/decoding.py``), drawn
from its numbers in English or Chinese, so that both pages show it in their language.

One panel per model (a 1-layer and a 4-layer toy decoder): milliseconds per generated token against
the token's position, one line per way of decoding (recomputing the prefix, a dynamic cache, a static
cache, and raw ``scaled_dot_product_attention`` with a cache as the floor), on a log scale. Each line
is a centred rolling median over 33 positions: a shared machine adds millisecond spikes to single steps.

``decoding.json``: ``{"models": {name: {variant: {"tokens_per_s": float, "per_token_ms": [n floats]}}}}``.
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
from pathlib import Path

from ...page.figures import WIDTH_IN, _plt, pick

VARIANTS = (("recompute", "-", "recompute the prefix", "重算前缀"), ("dynamic", "-", "dynamic cache", "动态缓存"),
            ("static", "--", "static cache", "静态缓存"), ("sdpa_raw", ":", "raw SDPA + cache", "直接调用 SDPA + 缓存"))
WINDOW = 33  # positions per rolling median


def rolling_median(xs: list[float], w: int = WINDOW) -> list[float]:
    """Centred rolling median of ``xs`` over ``w`` positions (fewer at the ends)."""
    h = w // 2
    return [statistics.median(xs[max(0, i - h): i + h + 1]) for i in range(len(xs))]


def decoding_figure(results: dict, lang: str = "en"):
    """Milliseconds per token by position, one panel per model of ``results["models"]``; returns the figure."""
    models = results.get("models") or {}
    if not models:
        raise ValueError("decoding_figure: results['models'] is empty; pass the JSON of benchmarks/decoding.py")
    plt = _plt()
    fig, axes = plt.subplots(1, len(models), figsize=(WIDTH_IN, 4.2), squeeze=False, constrained_layout=True)
    for ax, (name, row) in zip(axes[0], models.items()):
        for k, (variant, style, en, zh) in enumerate(VARIANTS):
            if variant not in row or not row[variant].get("per_token_ms"):
                continue
            ms = rolling_median(row[variant]["per_token_ms"][1:])  # the first token includes the prompt's forward
            rate = row[variant]["tokens_per_s"]
            ax.plot(range(1, len(ms) + 1), ms, style, color=f"C{k}", linewidth=1.3,
                    label=pick(lang, f"{en} ({rate:.0f} tok/s)", f"{zh}（{rate:.0f} token/秒）"))
        ax.set_yscale("log")
        ax.set_xlabel(pick(lang, "position of the generated token", "生成 token 的位置"))
        ax.set_ylabel(pick(lang, f"ms per token (rolling median of {WINDOW})", f"每 token 毫秒（{WINDOW} 个位置的滚动中位数）"))
        layers = re.fullmatch(r"(\d+)_layers?", name)  # "4_layer" -> 4 层; another name is shown as it is
        zh_name = f"{layers.group(1)} 层" if layers else name.replace("_", " ")
        ax.set_title(pick(lang, f"toy decoder, {name.replace('_', ' ')}, fp32, B=1", f"玩具解码器，{zh_name}，fp32，B=1"), fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    return fig


def decoding_png(results: dict, out_dir: str | Path) -> Path:
    """:func:`decoding_figure` saved under ``out_dir`` in both languages (the Chinese copy in ``zh/``
    when a CJK font is found), once per version of the numbers and of this file."""
    from ...page.figures import cjk_font, save_both, zh_path

    version = hashlib.sha256(json.dumps(results, sort_keys=True).encode() + Path(__file__).read_bytes()).hexdigest()[:12]
    png = Path(out_dir) / f"decoding-{version}.png"
    if not png.is_file() or (cjk_font() is not None and not zh_path(png).is_file()):
        save_both(png, lambda lang: decoding_figure(results, lang))
    return png
