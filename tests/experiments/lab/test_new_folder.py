"""Adding an experiment is adding one folder: in a temporary copy of the package, a new folder under
``attnkit/experiments/`` (and no other file edited) is listed by ``attnkit experiment --list``, runs
with ``attnkit experiment NAME``, and gets its section, with its own title, question and summary
row, in ``attnkit report``. The example experiment of docs/experiments.md is run the same way.

Each check runs in a subprocess whose ``PYTHONPATH`` puts the copy first, so the copy is the
``attnkit`` that is imported (asserted), and the checkout's package is never touched.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import attnkit

ROOT = Path(__file__).resolve().parents[3]
PROBE = '''"""probe: a throw-away experiment, written by the test that adds it."""

from .experiment import Probe
'''
PROBE_EXPERIMENT = '''from attnkit.experiments import Experiment, Section, register
from attnkit.page.html import esc


@register
class Probe(Experiment):
    name = "probe_exp"
    help = "a throw-away experiment"
    quick = {"k": 2}
    full = {"k": 5}
    tiny = {"k": 3}
    title = ("The probe section", "探针一节")
    question = ("Does a new folder reach the page?", "新文件夹能上页面吗？")
    how_to_read = ("One number.", "一个数字。")
    report_order = 15

    def run(self, ctx):
        return {"score": ctx.config["k"] * 7}

    def report(self, results, out_dir, lang="en", full_results=None):
        return Section(self.heading(lang), f"<p>probe score {esc(results['score'])} in {lang}</p>")

    def summary(self, results, lang="en", full_results=None):
        return (f"score {results['score']}", "new folders are found")
'''
RENDER = '''import json, sys
from pathlib import Path
import attnkit
from attnkit.report.build import write_report
from attnkit.report.contents import story

name, runs, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
ids = [s.id for s in story()]
secs = [s for s in story() if s.id in (name, "summary")]
run = write_report(out, secs, runs=runs, size="tiny", log=lambda m: None)
print(json.dumps({"attnkit": attnkit.__file__, "ids": ids, "failed": run.failed}))
'''


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    """A copy of the installed attnkit package (the checkout's src/attnkit) under a temporary folder."""
    root = tmp_path_factory.mktemp("pkg")
    shutil.copytree(Path(attnkit.__file__).parent, root / "attnkit", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def python(copy: Path, *args: str, cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(copy), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def add_folder(copy: Path, folder: str, files: dict[str, str]) -> None:
    before = sorted(p.relative_to(copy) for p in copy.rglob("*.py"))
    d = copy / "attnkit" / "experiments" / folder
    d.mkdir()
    for name, text in files.items():
        (d / name).write_text(text, encoding="utf-8")
    after = sorted(p.relative_to(copy) for p in copy.rglob("*.py") if p.parent != d)
    assert after == before  # only the new folder was added


def list_run_render(copy: Path, tmp_path: Path, name: str) -> tuple[str, dict, str]:
    listed = python(copy, "-m", "attnkit.cli", "experiment", "--list", cwd=tmp_path)
    python(copy, "-m", "attnkit.cli", "experiment", name, "--no-progress", "--out", str(tmp_path / "runs" / name), cwd=tmp_path)
    (tmp_path / "render.py").write_text(RENDER, encoding="utf-8")
    shown = json.loads(python(copy, str(tmp_path / "render.py"), name, str(tmp_path / "runs"), str(tmp_path / "report"),
                              cwd=tmp_path).splitlines()[-1])
    assert shown["attnkit"].startswith(str(copy))  # the copy was imported, not the checkout
    return listed, shown, (tmp_path / "report" / "index.html").read_text(encoding="utf-8")


def test_a_new_folder_is_listed_run_and_rendered(copy, tmp_path):
    add_folder(copy, "probe", {"__init__.py": PROBE, "experiment.py": PROBE_EXPERIMENT})
    listed, shown, page = list_run_render(copy, tmp_path, "probe_exp")
    assert re.search(r"probe_exp\s+a throw-away experiment", listed)
    doc = json.loads((tmp_path / "runs" / "probe_exp" / "results.json").read_text())
    assert doc["experiment"] == "probe_exp" and doc["results"] == {"score": 14}  # the quick preset
    ids = shown["ids"]
    assert ids.index("intro") < ids.index("probe_exp") < ids.index("seq2seq")  # its report_order, 15
    assert shown["failed"] == []
    assert "<h2>The probe section</h2>" in page and "Does a new folder reach the page?" in page
    assert "<p>probe score 14 in en</p>" in page and "<td>score 14</td><td>new folders are found</td>" in page


def test_the_documented_example_runs_as_a_new_folder(copy, tmp_path):
    text = (ROOT / "docs" / "experiments.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "class CopyFirst" in b)
    add_folder(copy, "copy_first", {"__init__.py": block})
    listed, shown, page = list_run_render(copy, tmp_path, "copy_first")
    assert "copy_first" in listed
    res = json.loads((tmp_path / "runs" / "copy_first" / "results.json").read_text())["results"]
    accs = res["val_acc"]["0"]
    assert len(accs) == 4 and res["chance"] == 1 / 8
    assert accs[-1] > 2 * res["chance"]  # the one attention hop is learned well above chance at the quick size
    assert shown["failed"] == [] and "copy_first" in shown["ids"] and shown["ids"][-1] == "summary"
    assert "<h2>Reading the first token</h2>" in page and 'alt="validation accuracy"' in page
    assert f"<td>accuracy {accs[-1]:.2f} (chance 0.12)</td>" in page


def test_a_folder_that_fails_to_import_is_named_with_its_error_and_hides_nothing(copy, tmp_path):
    add_folder(copy, "broken_exp", {"__init__.py": "import attnkit.no_such_module\n"})
    listed = python(copy, "-m", "attnkit.cli", "experiment", "--list", cwd=tmp_path)
    assert re.search(r"broken_exp\s+\(not available: ModuleNotFoundError: No module named 'attnkit.no_such_module'\)", listed)
    assert "seq2seq" in listed and "tiny" in listed
    shutil.rmtree(copy / "attnkit" / "experiments" / "broken_exp")  # the copy is shared by this module's tests
