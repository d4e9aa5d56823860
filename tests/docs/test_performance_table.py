"""docs/performance.md's one-thread backend table is rebuilt from the committed benchmark JSON and must match it.

The table under "Measured on an Intel Xeon with AMX" (``| call | SDPA | blockwise |``) is derived from
``benchmarks/results/attention.json``: medians and peak memory above the inputs of SDPA and
blockwise on the same calls. A re-run of the benchmark that changes a number, or a hand edit of the
page, makes this test fail until the two agree again.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "attention.json"
HEADER = "| call | SDPA | blockwise |"

# row label -> (tag, mask, bias, dtype) of its rows in attention.json
FORWARD_ROWS = {
    "sliding window 256, n=16k, fp32": ("window16k", "sliding256", "none", "float32"),
    "ALiBi, n=8k, fp32": ("bias8k", "none", "alibi", "float32"),
    "T5 bias, n=8k, fp32": ("bias8k", "none", "t5", "float32"),
    "no mask, n=4k, bf16": ("bf16dense4k", "none", "none", "bfloat16"),
}
SHOW_MEMORY = {"float32"}  # the bf16 row shows time only
TRAIN_NS = (2048, 4096, 8192)


def _row(rows, backend, tag, mask, bias, dtype, n=None):
    found = [r for r in rows if r["backend"] == backend and r["tag"] == tag and r["mask"] == mask
             and r["bias"] == bias and r["dtype"] == dtype and (n is None or r["n"] == n)]
    assert len(found) == 1, f"attention.json has {len(found)} rows for {backend} {tag} {mask} {bias} {dtype} {n}; expected 1"
    return found[0]


def expected_table(data: dict) -> list[str]:
    """The table's lines (header, rule, rows) as attention.json's numbers give them."""
    rows = data["rows"]
    lines = [HEADER, "|---|---|---|"]
    for label, key in FORWARD_ROWS.items():
        s, b = _row(rows, "sdpa", *key), _row(rows, "blockwise", *key)
        speed = f"{s['median_ms'] / b['median_ms']:.3g}×"
        if key[3] in SHOW_MEMORY:
            sdpa = f"{s['median_ms']:,.0f} ms, {s['peak_mib']:,.0f} MiB"
            blk = f"{b['median_ms']:,.0f} ms ({speed}), {b['peak_mib']:,.0f} MiB (1/{s['peak_mib'] / b['peak_mib']:.0f})"
        else:
            sdpa, blk = f"{s['median_ms']:,.0f} ms", f"{b['median_ms']:,.0f} ms ({speed})"
        lines.append(f"| {label} | {sdpa} | {blk} |")
    mib = {be: " / ".join(f"{_row(rows, be, 'train_window', 'sliding256', 'none', 'float32', n)['peak_mib']:,.0f}"
                          for n in TRAIN_NS) + " MiB" for be in ("sdpa", "blockwise")}
    lines.append(f"| fwd+bwd, window 256, n=2k/4k/8k | {mib['sdpa']} | {mib['blockwise']} |")
    return lines


PAGE = ROOT / "docs" / "performance.md"


def page_table(text: str) -> list[str]:
    lines = text.splitlines()
    if HEADER not in lines:
        raise AssertionError(f"docs/performance.md has no line {HEADER!r}; the performance table moved or was renamed")
    i = lines.index(HEADER)
    j = i
    while j < len(lines) and lines[j].startswith("|"):
        j += 1
    return lines[i:j]


def test_the_performance_table_matches_the_committed_json():
    data = json.loads(RESULTS.read_text())
    assert page_table(PAGE.read_text(encoding="utf-8")) == expected_table(data)


def test_the_check_fails_when_a_number_differs():
    data = json.loads(RESULTS.read_text())
    row = _row(data["rows"], "blockwise", *FORWARD_ROWS["sliding window 256, n=16k, fp32"])
    row["median_ms"] *= 1.5  # a re-run that changed the time
    with pytest.raises(AssertionError):
        assert page_table(PAGE.read_text(encoding="utf-8")) == expected_table(data)
