"""The README's packed-vs-padded claim is the committed benchmark's (``benchmarks/packed_vs_padded.py``
→ ``benchmarks/results/packed_vs_padded.json``): rerunning the benchmark without updating the
sentence, or editing the sentence by hand, fails here."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULT = ROOT / "benchmarks" / "results" / "packed_vs_padded.json"


def test_readme_states_the_committed_packed_vs_padded_numbers():
    r = json.loads(RESULT.read_text())
    speed, memory = r["speedup_packed_over_padded"], r["memory_padded_over_packed"]
    assert speed == r["median_ms"]["padded"] / r["median_ms"]["packed"]
    assert memory == r["memory"]["padded"]["extra_mib_median"] / r["memory"]["packed"]["extra_mib_median"]
    readme = " ".join((ROOT / "README.md").read_text().split())  # line breaks as spaces
    claim = (f"On {r['batch_summary']['n']} Bible verses ({r['batch_summary']['min']} to {r['batch_summary']['max']} "
             f"tokens, {r['tokens']['padded_over_real']:.1f}x padding), one causal layer's forward + backward ran "
             f"{speed:.2f}x faster packed than padded and used {memory:.2f}x less memory")
    assert claim in readme, claim
