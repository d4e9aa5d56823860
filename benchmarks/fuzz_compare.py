"""Two runs of the differential fuzz (``fuzz_attention.py``, same cases: same ``--cases``, ``--seed`` and
``--budget``) compared per backend × dtype × mask: the passed / declined / failed counts of each.

The fuzz draws its cases from the seed alone, so two runs of the same command on two versions of
the code judge the same cases; any count that moved is a case whose verdict changed (a backend that
now declines it, passes it, or fails it). Each pair of files gives one entry: the cells (backend,
dtype, mask) whose counts differ, with both counts, and the same at the finer grain of the bias
(``differences_by_bias``); ``same`` is true when no cell differs.

Run:  python benchmarks/fuzz_compare.py --pair NAME BEFORE.json AFTER.json [--pair ...] --out FILE
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: the shared helpers
from common import record  # noqa: E402


def cells(counts: dict, by_bias: bool) -> dict[str, Counter]:
    """{"backend / dtype / mask[ / bias]": Counter(passed=, declined=, failed=)} of a fuzz JSON's counts."""
    out: dict[str, Counter] = {}
    for backend, dtypes in counts.items():
        for dtype, masks in dtypes.items():
            for mask, biases in masks.items():
                for bias, verdicts in biases.items():
                    key = " / ".join([backend, dtype, mask] + ([bias] if by_bias else []))
                    out.setdefault(key, Counter()).update(verdicts)
    return out


def compare(before: dict, after: dict) -> dict:
    entry = {"cases": [before["cases_run"], after["cases_run"]], "failed": [before["cases_failed"], after["cases_failed"]],
             "per_backend": {"before": before["summary"]["per_backend"], "after": after["summary"]["per_backend"]}}
    for name, by_bias in (("differences", False), ("differences_by_bias", True)):
        a, b = cells(before["counts"], by_bias), cells(after["counts"], by_bias)
        entry[name] = {k: {"before": dict(a.get(k, {})), "after": dict(b.get(k, {}))}
                       for k in sorted(set(a) | set(b)) if a.get(k, Counter()) != b.get(k, Counter())}
        entry["cells" if not by_bias else "cells_by_bias"] = len(set(a) | set(b))
    entry["same"] = not entry["differences"] and not entry["differences_by_bias"]
    return entry


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", nargs=3, action="append", metavar=("NAME", "BEFORE", "AFTER"), required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    doc = {"what": __doc__.splitlines()[0], "pairs": {}}
    for name, before, after in args.pair:
        a, b = (json.loads(Path(p).read_text(encoding="utf-8")) for p in (before, after))
        entry = compare(a, b)
        entry["files"] = [before, after]
        entry["commits"] = [a.get("provenance", {}).get("commit"), b.get("provenance", {}).get("commit")]
        doc["pairs"][name] = entry
        print(f"{name}: {entry['cells']} cells, {len(entry['differences'])} differ; same = {entry['same']}")
    record(args.out, doc)


if __name__ == "__main__":
    main()
