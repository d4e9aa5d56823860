"""The blockwise routes (one ``Route`` interface, one ``ROUTES`` list) changed no behaviour: the
committed fuzz runs before and after judge the same cases alike, and every route keeps its path,
its estimate and ``auto``'s choice (benchmarks/results/fuzz_routes_*.json,
routes_refactor_verdicts.json; docs/performance.md states them)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from attnkit.backends.blockwise import routes

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
COMPARE = RESULTS / "fuzz_routes_compare.json"
VERDICTS = RESULTS / "routes_refactor_verdicts.json"
PAIRS = {"small": ("fuzz_routes_before_small.json", "fuzz_routes_after_small.json"),
         "full": ("fuzz_routes_before_full.json", "fuzz_routes_after_full.json")}

pytestmark = pytest.mark.skipif(not COMPARE.is_file() or not VERDICTS.is_file(), reason="needs a source checkout")


def _load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def _fuzz_compare():
    script = ROOT / "benchmarks" / "fuzz_compare.py"
    sys.path.insert(0, str(script.parent))
    spec = importlib.util.spec_from_file_location("fuzz_compare", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("pair", list(PAIRS))
def test_the_fuzz_judges_every_case_alike_before_and_after(pair):
    before, after = (_load(name) for name in PAIRS[pair])
    assert before["provenance"]["argv"][:4] == after["provenance"]["argv"][:4]  # the same --cases and --seed
    assert before.get("budget") == after.get("budget") and before["cases_run"] == after["cases_run"]
    assert before["provenance"]["commit"] != after["provenance"]["commit"]
    fresh = _fuzz_compare().compare(before, after)  # the committed comparison is that of the committed runs
    stored = json.loads(COMPARE.read_text(encoding="utf-8"))["pairs"][pair]
    assert fresh["differences"] == stored["differences"] and fresh["same"] == stored["same"]
    assert fresh["same"], f"counts moved: {sorted(fresh['differences'])[:5]}"
    assert before["cases_failed"] == after["cases_failed"] == 0


def test_every_route_keeps_its_path_estimate_and_auto_choice():
    rows = json.loads(VERDICTS.read_text(encoding="utf-8"))["rows"]
    assert {r["path"] for r in rows.values()} == {r.name for r in routes.ROUTES}  # one case per route
    for name, row in rows.items():
        assert row["verdict"] == "same path, estimate and choice", (name, row)


def _ratios(name: str) -> tuple[str, str]:
    """("between A× and B× (forward) and C× and D×", "load X–Y") of a verdicts file, as the page says them."""
    doc = _load(name)
    fwd = [r["forward_ratio"] for r in doc["rows"].values()]
    both = [r["forward_backward_ratio"] for r in doc["rows"].values()]
    return (f"between {min(fwd):.2f}× and {max(fwd):.2f}× (forward) and {min(both):.2f}× and {max(both):.2f}×",
            f"load {min(doc['loadavg_1min']):.0f}–{max(doc['loadavg_1min']):.0f}")


def test_the_performance_page_says_what_the_files_say():
    from _doc_claims import PERFORMANCE, says

    pairs = json.loads(COMPARE.read_text(encoding="utf-8"))["pairs"]
    later, earlier = _load("routes_refactor_verdicts.json"), _load("routes_refactor_verdicts_run1.json")
    lo, hi = earlier["rows"]["dropout"]["forward_ratio_range"]
    says(PERFORMANCE, f"({pairs['small']['cells']:,} and {pairs['full']['cells']:,} of them)",
         *_ratios("routes_refactor_verdicts.json"), *_ratios("routes_refactor_verdicts_run1.json"),
         f"forward at {earlier['rows']['document']['forward_ratio']:.2f}× there and "
         f"{later['rows']['document']['forward_ratio']:.2f}× here",
         f"({lo:.2f}× to {hi:.2f}×, median {later['rows']['dropout']['forward_ratio']:.2f}× in the later run)")
