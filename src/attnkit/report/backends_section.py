"""Report section: the registered backends, and which one ``auto`` picks for typical calls and why."""

from __future__ import annotations

import torch

from .. import attention
from ..core import biases, masks, scores
from ..core.registry import available
from .html import esc, svg_heatmap, table


def _example_calls(L: int = 64) -> list[tuple[str, dict]]:
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


def backends_section() -> str:
    reg = table(
        ["backend", "exact softmax", "priority", "cost estimate"],
        [(b.name, "yes" if b.exact else "no (approximation)", b.priority, "yes" if b.estimate else "no") for b in available()],
    )
    L = 64
    q = torch.randn(2, 4, L, 16)
    rows = []
    for name, kw in _example_calls(L):
        res = attention(q, q, q, **kw)
        r = res.report
        rows.append((name, r.backend, r.reason, "; ".join(f"{k}: {v}" for k, v in r.rejected.items()), f"{r.materialized_bytes:,}", r.fully_masked_rows))
    calls = table(["call (B=2, H=4, L=S=64, E=16)", "ran", "why", "others and why not", "dense bytes", "fully masked rows"], rows)
    return f"<h3>Registered backends</h3>{reg}<h3>What <code>auto</code> chose</h3>{calls}"


def attention_map_section() -> str:
    """A small map: 12 tokens, causal mask plus ALiBi, head 0 vs head 3 (different slopes)."""
    torch.manual_seed(1)
    L = 12
    q = torch.randn(1, 4, L, 16)
    k = torch.randn(1, 4, L, 16)
    res = attention(q, k, k, mask=masks.causal(), bias=biases.ALiBi(4), return_weights=True)
    labels = [f"t{i}" for i in range(L)]
    maps = "".join(
        f"<figure style='display:inline-block;margin:0 1em'>{svg_heatmap(res.weights[0, h].tolist(), labels, labels, title=f'head {h}')}"
        f"<figcaption>head {h}, ALiBi slope {float(biases.alibi_slopes(4)[h]):.3f}</figcaption></figure>"
        for h in (0, 3)
    )
    return (
        "<p>Random queries and keys with a causal mask and ALiBi. Rows are queries, columns keys; "
        "masked cells are exactly 0. The steep-slope head (0) looks at recent tokens; the shallow one (3) further back.</p>"
        + maps
        + f"<pre>{esc(str(res.report))}</pre>"
    )
