"""The typical calls whose ``auto`` dispatch the cost section shows (the backend that ran, and why),
and attnkit's English dispatch reasons in Chinese for the Chinese page.

Shapes: every call is q = k = v (B=2, H=4, L=S, E=16).
"""

from __future__ import annotations

import re

import torch

from ...core import biases, masks, scores


def example_calls(L: int = 64) -> list[tuple[str, dict]]:
    """(name, keyword arguments of :func:`attnkit.attention`) of nine typical calls of length ``L``."""
    torch.manual_seed(0)
    return [
        ("plain", {}),
        ("causal (L == S)", {"mask": masks.causal()}),
        ("padding (lengths 40, 64)", {"mask": masks.padding_mask([40, 64], L)}),
        ("sliding window 16", {"mask": masks.sliding_window(left=15, right=0)}),
        ("document ids", {"mask": masks.document(torch.arange(L) // 20)}),
        ("ALiBi bias", {"bias": biases.ALiBi(4)}),
        ("causal + T5 bias", {"mask": masks.causal(), "bias": biases.T5RelativeBias(4, bidirectional=False)}),
        ("additive (Bahdanau) score", {"score": scores.AdditiveScore(16)}),
        ("weights requested", {"mask": masks.causal(), "return_weights": True}),
    ]


CALLS_ZH = {"plain": "无掩码", "causal (L == S)": "因果（L == S）", "padding (lengths 40, 64)": "填充（长度 40、64）",
            "sliding window 16": "滑动窗口 16", "document ids": "文档编号", "ALiBi bias": "ALiBi 偏置",
            "causal + T5 bias": "因果 + T5 偏置", "additive (Bahdanau) score": "加性（Bahdanau）打分", "weights requested": "要求返回权重"}
# the blockwise backend's routes (its reports' "path: ..." and "ran: ..."), then the reason's frame
_ROUTES_ZH = ((r"Python tile loop", "Python 分块循环"), (r"fused kernel, one call", "融合内核，一次调用"),
              (r"fused kernel, causal \(prefix \+ is_causal square, lse merge\)", "融合内核，因果（前缀 + is_causal 方块，合并 lse）"),
              (r"fused kernel, banded windows per query block", "融合内核，按查询块的带状窗口"),
              (r"fused kernel per query block on the mask's non-empty tiles, lse merge", "按查询块的融合内核，只算掩码的非空分块，合并 lse"),
              (r"fused kernel per query block, relative bias as a view of its offsets", "按查询块的融合内核，相对偏置取自其偏移量的视图"))
_REASONS_ZH = ((r"lowest estimated time \(", "估计时间最短（"), (r"preferred and within ([0-9.]+)x of the fastest estimate \(", r"首选后端，且在最快估计的 \1 倍以内（"),
               *_ROUTES_ZH, (r"; path: ", "；路径："), (r"\); ran: ", "）；实际运行："), (r" ms", " 毫秒"), (r"\)$", "）"), (r", ", "，"))


def reason(text: str, lang: str) -> str:
    """attnkit's dispatch reason (English, from the call's report) in the page's language."""
    if lang != "zh":
        return text
    for pattern, repl in _REASONS_ZH:
        text = re.sub(pattern, repl, text)
    return text
