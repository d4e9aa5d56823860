"""benchmarks/ is navigable: every live JSON is indexed in benchmarks/README.md (claim → script →
command → JSON → test), no script imports another script's names, and ``common.record`` stamps each
JSON with the commit, torch, the CPU and the command that made it."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
INDEX = BENCH / "README.md"

pytestmark = pytest.mark.skipif(not INDEX.is_file(), reason="needs a source checkout")


def _indexed() -> set[str]:
    """The JSON names in the index's table rows (first cell)."""
    rows = re.findall(r"^\| `([\w.-]+\.json)` \|", INDEX.read_text(encoding="utf-8"), flags=re.M)
    assert len(rows) == len(set(rows)), "a JSON is indexed twice"
    return set(rows)


def test_every_live_json_is_indexed_and_every_indexed_json_exists():
    live = {p.name for p in (BENCH / "results").glob("*.json")}
    indexed = _indexed()
    assert not live - indexed, f"not in benchmarks/README.md: {sorted(live - indexed)}; index it or git mv it to results/archive/"
    assert not indexed - live, f"indexed but absent: {sorted(indexed - live)}"


def test_every_indexed_row_names_a_script_that_exists():
    text = INDEX.read_text(encoding="utf-8")
    scripts = {p.name for p in BENCH.glob("*.py")}
    for row in re.findall(r"^\| `[\w.-]+\.json` \|([^|]+)\|", text, flags=re.M):
        named = set(re.findall(r"(\w+\.py)", row)) or ({"attention.py"} if "attnkit bench" in row else set())
        assert named and named <= scripts, f"row names no script of benchmarks/: {row.strip()}"


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out.extend((a.name, []) for a in node.names)
    return out


def test_no_script_imports_another_scripts_names():
    """Shared pieces live, public, in common.py; a script never reaches into a sibling (nor any module's
    ``_private`` names, except the tests' own fuzz helpers the fuzz script drives)."""
    scripts = {p.stem for p in BENCH.glob("*.py")} - {"common", "__init__"}
    for path in sorted(BENCH.glob("*.py")):
        for module, names in _imports(path):
            assert module.split(".")[0] not in scripts, f"{path.name} imports the script {module}; move what it needs to common.py"
            private = [n for n in names if n.startswith("_")]
            assert not private or module.startswith("_fuzz"), f"{path.name} imports private {private} from {module}"


def test_record_stamps_the_commit_torch_cpu_and_command(tmp_path, monkeypatch):
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("common", BENCH / "common.py")
        common = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(common)
    finally:
        sys.path.remove(str(BENCH))
    monkeypatch.setattr(sys, "argv", ["benchmarks/some_script.py", "--reps", "3"])
    path = common.record(tmp_path / "x" / "out.json", {"rows": [1, 2], "provenance": "stale"})
    doc = json.loads(path.read_text(encoding="utf-8"))
    p = doc["provenance"]
    assert list(doc) == ["provenance", "rows"] and doc["rows"] == [1, 2]
    assert p["script"] == "benchmarks/some_script.py" and p["argv"] == ["--reps", "3"]
    assert p["torch"] == torch.__version__ and p["threads"] == torch.get_num_threads()
    assert p["commit"] is None or re.fullmatch(r"[0-9a-f]{40}", p["commit"])
    if (ROOT / ".git").exists():
        assert p["commit"] is not None and isinstance(p["dirty"], bool)
    if Path("/proc/cpuinfo").exists():
        assert p["cpu"]["model"] and all(isinstance(p["cpu"][f], bool) for f in ("avx512f", "amx_tile"))


def _commit_cells() -> dict[str, str]:
    """JSON name → the index's commit column (the last cell of its row)."""
    rows = re.findall(r"^\| `([\w.-]+\.json)` \|(.*)\|\s*$", INDEX.read_text(encoding="utf-8"), flags=re.M)
    return {name: cells.split("|")[-1].strip() for name, cells in rows}


def test_the_commit_column_names_the_stamp_in_each_file():
    """A stamped JSON's row starts with its commit (7 hex); an unstamped one says in words why it has none."""
    for name, cell in _commit_cells().items():
        doc = json.loads((BENCH / "results" / name).read_text(encoding="utf-8"))
        stamp = doc.get("provenance") if isinstance(doc, dict) else None
        if stamp and stamp.get("commit"):
            assert cell.startswith(stamp["commit"][:7]), f"{name}: the index says {cell!r}, the file's stamp is {stamp['commit'][:7]}"
        else:
            assert re.search(r"[a-z]{3,} [a-z]{3,}", cell), f"{name} carries no commit: say why in its index row, got {cell!r}"


def test_every_script_writes_its_json_through_record():
    """No script writes a result JSON itself: ``common.record`` is the one writer, so every file carries its stamp."""
    for path in sorted(BENCH.glob("*.py")):
        if path.name == "common.py":
            continue
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"write_text\(\s*json\.dumps|json\.dump\(", text), f"{path.name} writes JSON itself; call common.record"
