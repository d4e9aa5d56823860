"""docs/serve.md (the README's playground page) says the committed latency numbers, links every screenshot,
and documents the API's limits with the values the code uses."""

from __future__ import annotations

import json
import re
from pathlib import Path

from attnkit.serve import limits as LIM

ROOT = Path(__file__).resolve().parents[2]
README = re.sub(r"\s+", " ", (ROOT / "docs" / "serve.md").read_text(encoding="utf-8"))
LATENCY = json.loads((ROOT / "benchmarks" / "results" / "serve_latency.json").read_text(encoding="utf-8"))


def latency_claims() -> list[str]:
    rows = {r["case"]: r for r in LATENCY["rows"]}
    masks = [r for r in LATENCY["rows"] if r["case"].startswith("attention_100")]
    none, long, dec = rows["attention_100_none"], rows["attention_512_none"], rows["decode_40_dynamic"]
    return [
        f"{none['cpu_p50_ms']} ms median and {none['cpu_p95_ms']} ms p95 of CPU time",
        f"at most {max(r['cpu_p95_ms'] for r in masks)} ms p95 of CPU over the four masks",
        f"{none['p50_ms']} ms median and {none['p95_ms']} ms p95 (at most {max(r['p95_ms'] for r in masks)} ms p95",
        f"load average {LATENCY['machine']['load_average_1min']}",
        f"512 tokens: {long['p50_ms']} ms median ({long['cpu_p50_ms']} ms of CPU)",
        f"40 decoding steps: {dec['p50_ms']} ms median",
        f"({LATENCY['model_load_s']} s here)",
        "within the 1 s goal" if LATENCY["goal_met_cpu"] else "over the 1 s goal even in CPU time",
    ]


def test_latency_numbers_are_the_committed_json():
    missing = [c for c in latency_claims() if c not in README]
    assert not missing, missing


def test_screenshots_are_linked_and_exist():
    for lang in ("zh", "en"):
        for width in ("laptop", "phone"):
            rel = f"screenshots/serve_{lang}_{width}.png"
            assert f"({rel})" in README and (ROOT / "docs" / rel).is_file()


def test_limits_in_the_readme_are_the_codes():
    assert f"limited to {LIM.MAX_TOKENS} tokens" in README
    assert f"past {LIM.FULL_WEIGHTS_MAX} tokens" in README
    assert f"top-{LIM.TOP_K} keys" in README and f"{LIM.THUMB_MAX} × {LIM.THUMB_MAX} block averages" in README
    assert f"appends {LIM.PAD_EXTRA} [PAD] tokens" in README
    assert f"capped ({LIM.MAX_BODY_BYTES // 1024} KiB)" in README
