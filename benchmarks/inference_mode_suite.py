"""The whole test suite once under ``torch.inference_mode()``: how many tests pass there, how many
cannot apply (they need autograd), and the findings.

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/inference_mode_suite.py --work /tmp/im

Runs ``pytest --inference-mode`` (``tests/_inference_mode.py``) on each part of ``tests/`` in turn,
one process each, writing ``--inference-mode-report`` JSON per part under ``--work`` (a part whose
report exists is not run again: an interrupted run resumes). Then it sums the parts into
``benchmarks/results/trust_inference_mode_suite.json``: passed; *not applicable* (failed with one
of autograd's own messages, ``AUTOGRAD_NEEDS``); *explained* (a failure investigated and found to
assert what only a recorded backward does, ``EXPLAINED``, with its reason; a failure of a run made
before a test joined the table is classified by today's table); found (counted not applicable by a
message today's table no longer accepts, because it hid a finding since fixed); findings (any other
failure); and skipped. ``--collect-only`` sums existing reports without running anything. Not a timing: one
thread keeps the shared machine usable, nothing is timed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: the shared helpers
from common import ROOT, record  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))
import _inference_mode as im  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "trust_inference_mode_suite.json"
FINDINGS_FIXED = [
    {"what": "flex on CPU under torch.no_grad() or inference mode with q, k or v that require grad: supports() "
             "accepted the call, then FlexAttention raised 'does not support backward on CPU'",
     "fix": "backends/flex.py runs them detached (no backward is recorded there)",
     "pinned_by": "tests/core/test_trust_flex_grads.py::test_inputs_that_require_grad_run_on_cpu_where_no_backward_is_recorded"},
    {"what": "torch.enable_grad() inside inference mode with q, k, v that require grad: the sdpa, blockwise and auto "
             "backends raised 'Inference tensors cannot be saved for backward' (their autograd.Function) and sinks "
             "asked for an lse with gradients; seen in 2 tests the run first counted not applicable "
             "(test_call_cache [requires_grad], test_trust_state_machine random sequence 1)",
     "fix": "core/call.py runs such a call under no_grad (inference mode records no graph either way); the message "
            "is no longer counted as not applicable",
     "pinned_by": "tests/core/test_trust_inference_mode.py"},
]


def parts() -> list[str]:
    """The suite in parts: each folder of tests/, then each test file at its top."""
    tests = ROOT / "tests"
    folders = sorted(p for p in tests.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
    return [f"tests/{p.name}" for p in folders] + [f"tests/{p.name}" for p in sorted(tests.glob("test_*.py"))]


def run_part(part: str, work: Path) -> Path:
    report = work / (part.replace("/", "_").replace(".", "_") + ".json")
    if not report.exists():
        tmp = report.with_suffix(".tmp")
        cmd = [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q", "--inference-mode",
               "--inference-mode-report", str(tmp), part]
        with open(report.with_suffix(".log"), "w") as log:
            subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS="1"))
        tmp.replace(report)
    return report


def summarize(reports: dict[str, Path]) -> dict:
    total = Counter()
    per_part, explained, findings, found, messages = {}, {}, [], [], Counter()
    for part, path in reports.items():
        got = json.loads(path.read_text())
        later = {n: im.EXPLAINED[n.split("[")[0]] for n in got["failed"] if n.split("[")[0] in im.EXPLAINED}
        got["explained"] = {**got.get("explained", {}), **later}
        got["failed"] = [n for n in got["failed"] if n not in later]
        # a message today's table no longer counts (one that hid a finding, since fixed): a finding of this run
        got["found"] = [n for n, m in got["not_applicable"].items() if not im._NEEDS.search(m)]
        got["not_applicable"] = {n: m for n, m in got["not_applicable"].items() if n not in got["found"]}
        counts = {k: len(got[k]) for k in ("passed", "not_applicable", "explained", "found", "failed", "skipped")}
        found += got["found"]
        per_part[part] = counts
        total.update(counts)
        explained.update(got["explained"])
        findings += got["failed"]
        messages.update(got["not_applicable"].values())
    return {"counts": dict(total), "per_part": per_part, "not_applicable_by_message": dict(messages.most_common()),
            "explained": explained, "found_then_fixed": found, "findings_open": findings, "findings_fixed": FINDINGS_FIXED}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True, help="folder for each part's report and log (resumable)")
    ap.add_argument("--collect-only", action="store_true", help="sum the reports under --work; run nothing")
    ap.add_argument("--note", default="", help="a sentence on how the run was made (the code, the machine's load)")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    reports = {}
    for part in parts():
        path = args.work / (part.replace("/", "_").replace(".", "_") + ".json")
        if not args.collect_only:
            path = run_part(part, args.work)
        if path.exists():
            reports[part] = path
    doc = {"what": __doc__.splitlines()[0], "note": args.note, "parts_missing": [p for p in parts() if p not in reports],
           **summarize(reports)}
    print(json.dumps(doc["counts"]), "findings open:", doc["findings_open"])
    print("saved", record(OUT, doc))


if __name__ == "__main__":
    main()
