"""docs/performance.md's tables of CPU speed goals (and the Flex and floor tables) are exactly what
``benchmarks/goal_table.py`` builds from the committed benchmark JSON: re-running a benchmark that
changes a number, or editing the page by hand, fails here until ``python benchmarks/goal_table.py
--write`` makes the two agree again."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "goal_table.py"

pytestmark = pytest.mark.skipif(not SCRIPT.is_file(), reason="needs a source checkout")


def _module():
    spec = importlib.util.spec_from_file_location("goal_table", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _page_block(name: str = "goal-table") -> list[str]:
    text = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    found = re.search(rf"<!-- {name}:start -->\n(.*?)\n<!-- {name}:end -->", text, re.S)
    assert found, f"docs/performance.md has no {name} between its markers"
    return found.group(1).splitlines()


def test_the_page_goal_table_is_rebuilt_from_the_committed_json():
    assert _page_block() == _module().table_lines()


def test_the_page_flex_table_is_rebuilt_from_the_committed_json():
    assert _page_block("flex-table") == _module().flex_lines()


def test_the_flex_table_names_every_row_where_flex_is_faster(tmp_path):
    mod = _module()
    for name in mod.FILES:
        (tmp_path / name).write_text((mod.RESULTS / name).read_text(encoding="utf-8"), encoding="utf-8")
    race = json.loads((tmp_path / "flex_race.json").read_text(encoding="utf-8"))
    for r in race["rows"]:
        if r["case"] == "causal_8k_fp32_fwd" and r["impl"] == "flex":
            r["median_ms"] = 1.0  # Flex now far faster on this row
    (tmp_path / "flex_race.json").write_text(json.dumps(race), encoding="utf-8")
    lines = mod.flex_lines(tmp_path)
    row = next(line for line in lines if line.startswith("| causal, n=8k |"))
    assert "| 1.0 ms |" in row
    assert "causal, n=8k (1.0 ms against" in lines[-1]


def test_the_table_follows_its_json(tmp_path):
    """A changed number in the JSON changes the table (the table is computed, not copied)."""
    mod = _module()
    for name in mod.FILES:
        (tmp_path / name).write_text((mod.RESULTS / name).read_text(encoding="utf-8"), encoding="utf-8")
    race = json.loads((tmp_path / "flex_race.json").read_text(encoding="utf-8"))
    race["goals"]["window256_16k_fp32_fwdbwd:blockwise_fused"] = {"measured": {"median_ms": 400.0, "peak_above_inputs_mib": 99.0}, "met": True}
    for r in race["rows"]:
        if r["case"] == "window256_16k_fp32_fwdbwd" and r["impl"] == "blockwise_fused":
            r["run_medians_ms"] = [390.0, 400.0, 410.0]
    (tmp_path / "flex_race.json").write_text(json.dumps(race), encoding="utf-8")
    lines = mod.table_lines(tmp_path)
    row = next(line for line in lines if "forward+backward" in line)
    assert "400 ms (median of 3 processes, 390–410), 99 MiB | yes |" in row
    assert lines != mod.table_lines()


def test_the_page_tables_of_the_second_cpu_are_rebuilt_from_its_json():
    mod = _module()
    tag = mod.SECOND_MACHINE
    assert _page_block(f"goal-table-{tag}") == mod.table_lines(tag=tag)
    assert _page_block(f"flex-table-{tag}") == mod.flex_lines(tag=tag)


def test_a_tagged_table_lists_only_what_its_files_measure(tmp_path):
    """Another machine's run may hold some benchmarks only: its table leaves the others out instead
    of failing, and the forward+backward ratio line appears only beside a same-run earlier code's row."""
    mod = _module()
    race = json.loads((mod.RESULTS / "flex_race.json").read_text(encoding="utf-8"))
    (tmp_path / "flex_race_x.json").write_text(json.dumps(race), encoding="utf-8")
    lines = mod.table_lines(tmp_path, tag="x")
    assert any(line.startswith("| window 256, n=16k: ≥ 1.8×") for line in lines)
    assert not any("bf16" in line or "custom bias" in line or "`is_causal`" in line for line in lines)
    assert not any("as the goal's ratio" in line for line in lines)
    flex = mod.flex_lines(tmp_path, tag="x")
    assert not any("custom bias" in line for line in flex) and any("prefix-LM" in line for line in flex)
    mine = next(r for r in race["rows"] if r["case"] == "window256_16k_fp32_fwdbwd" and r["impl"] == "blockwise_fused")
    race["rows"].append(dict(mine, impl="blockwise_before", median_ms=2 * mine["median_ms"]))
    mine["speedup_vs_blockwise_before"] = 2.0
    (tmp_path / "flex_race_x.json").write_text(json.dumps(race), encoding="utf-8")
    ratio = next(line for line in mod.table_lines(tmp_path, tag="x") if "as the goal's ratio" in line)
    assert "= 2.00× | yes |" in ratio


def test_the_page_floor_table_is_rebuilt_from_its_json():
    mod = _module()
    assert _page_block(f"floor-table-{mod.SECOND_MACHINE}") == mod.floor_lines()


def test_the_second_cpus_bias_rows_come_from_its_default_allocator_run(tmp_path):
    """A machine's run with glibc's default allocator (the time a user sees) is the one its bias rows
    read; without one, the tagged file with the benchmark's allocator setting."""
    mod = _module()
    tag = mod.SECOND_MACHINE
    assert mod._tagged(mod.RESULTS, "bias_and_small.json", tag).name == f"bias_and_small_default_malloc_{tag}.json"
    assert mod._tagged(tmp_path, "bias_and_small.json", tag).name == f"bias_and_small_{tag}.json"
    assert mod._tagged(tmp_path, "flex_race.json", tag).name == f"flex_race_{tag}.json"
    assert mod._tagged(tmp_path, "bias_and_small.json", None).name == "bias_and_small.json"
