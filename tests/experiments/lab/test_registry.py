"""The registry, the runner and the ``attnkit experiment`` command line, in-process: the results
schema, config merging, lookup errors that list the valid names, ``--seeds 0`` and unwritable
``--out`` rejected before any work, and the ``MissingData`` message."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys

import pytest

from attnkit.cli import main
from attnkit.data import MissingData
from attnkit.experiments import Experiment, RunContext, SetupError, get, names, register, run_experiment
from attnkit.experiments.lab import registry as reg

FAST = ["--no-progress", "--set", "n_train=64", "--set", "n_val=32", "--set", "epochs=1"]


def test_experiment_folders_are_listed_without_importing_them():
    assert {"tiny", "seq2seq", "vision", "forecast", "minilm", "misconceptions"} <= set(reg.folders())
    assert "lab" not in reg.folders()
    assert {"tiny", "minilm_maps", "misconceptions_heads"} <= set(names())  # a folder may hold several experiments
    assert get("tiny").name == "tiny"


def test_running_tiny_imports_no_other_experiment(tmp_path):
    code = ("import sys\n"
            "from attnkit.cli import main\n"
            f"assert main(['experiment', 'tiny', '--out', {str(tmp_path)!r}, *{FAST!r}]) == 0\n"
            "print(sorted(m for m in sys.modules if m.startswith('attnkit.experiments.')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = {m.split(".")[2] for m in ast.literal_eval(out.strip().splitlines()[-1])}
    assert loaded == {"lab", "tiny"}, loaded  # vision, seq2seq, ... stay unimported


def test_unknown_name_lists_the_valid_ones(capsys):
    with pytest.raises(ValueError, match=r"unknown experiment 'nope'; valid names: .*tiny"):
        get("nope")
    assert main(["experiment", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown experiment 'nope'" in err and "tiny" in err


def test_list(capsys):
    assert main(["experiment", "--list"]) == 0
    out = capsys.readouterr().out
    assert "tiny" in out and "minilm_maps" in out


def test_cli_writes_results_with_the_schema(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["experiment", "tiny", "--quick", "--out", str(out), *FAST, "--seeds", "2"]) == 0
    doc = json.loads((out / "results.json").read_text())
    assert doc["schema_version"] == 1 and doc["experiment"] == "tiny" and doc["preset"] == "quick"
    assert doc["seeds"] == [0, 1] and doc["config"]["epochs"] == 1 and doc["config"]["n_train"] == 64
    assert {"started", "finished", "time_s"} <= set(doc) and doc["time_s"] > 0
    assert {"torch", "python", "threads"} <= set(doc["env"])
    assert set(doc["results"]["seeds"]) == {"0", "1"}
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["reverser-seed0.pt", "reverser-seed1.pt"]
    assert not list(out.rglob(".*tmp-*"))  # no temporaries left behind
    assert f"wrote {out}/results.json" in capsys.readouterr().out


def test_experiment_flags_and_set_land_in_the_config(tmp_path):
    exp = get("tiny")
    doc = run_experiment(exp, out=tmp_path, overrides={"epochs": 1, "n_train": 32, "epoch_sleep": 0.0}, show_progress=False)
    assert doc["config"]["epochs"] == 1 and doc["config"]["lr"] == exp.quick["lr"]  # the rest from the preset
    from attnkit.experiments.lab.command import build_parser

    parser, own = build_parser(exp)
    assert own == ["epoch_sleep"]
    assert parser.parse_args(["--epoch-sleep", "0.5", "--full"]).epoch_sleep == 0.5


@pytest.mark.parametrize("bad", ["0", "-1", "two"])
def test_seeds_must_be_positive(bad, capsys):
    with pytest.raises(SystemExit) as e:
        main(["experiment", "tiny", "--seeds", bad])
    assert e.value.code == 2
    assert f"argument --seeds: must be an integer >= 1 (how many seeds to run), got '{bad}'" in capsys.readouterr().err
    with pytest.raises(SetupError, match="--seeds must be an integer >= 1"):
        run_experiment("tiny", seeds=0)


@pytest.mark.parametrize("where", ["file", "under_file"])
def test_unwritable_out_fails_before_any_work(tmp_path, capsys, monkeypatch, where):
    f = tmp_path / "a_file"
    f.write_text("x")
    out = f if where == "file" else f / "sub" / "dir"
    ran = []
    monkeypatch.setattr(type(get("tiny")), "run", lambda self, ctx: ran.append(1) or {})
    with pytest.raises(SystemExit) as e:
        main(["experiment", "tiny", "--out", str(out)])
    assert e.value.code == 2 and not ran
    err = capsys.readouterr().err
    expected = "is an existing file, not a folder" if where == "file" else f"lies under '{f}', which is a file"
    assert f"--out '{out}'" in err and expected in err and "give a folder path" in err
    assert f.read_text() == "x"


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
@pytest.mark.parametrize("out, why", [("/proc", "is not writable"), ("/proc/attnkit-out/run", "cannot be created")])
def test_readonly_out_fails_before_any_work(out, why, monkeypatch):
    # /proc takes no new files or folders even from root (CI runs as root, where chmod stops nothing)
    ran = []
    monkeypatch.setattr(type(get("tiny")), "run", lambda self, ctx: ran.append(1) or {})
    with pytest.raises(SetupError, match=f"--out '{out}' {why}"):
        run_experiment("tiny", out=out, show_progress=False)
    assert not ran


def test_register_checks_what_it_is_given():
    with pytest.raises(TypeError, match="Experiment subclass"):
        register(object)

    class NoName(Experiment):
        pass

    with pytest.raises(ValueError, match="name must be a non-empty word"):
        register(NoName)

    class Unjsonable(Experiment):
        name = "h5_unjsonable"
        quick = {"f": object()}

    with pytest.raises(TypeError, match="quick must be JSON-able"):
        register(Unjsonable)

    class Clash(Experiment):
        name = "tiny"

    with pytest.raises(ValueError, match="'tiny' is taken"):
        register(Clash)


def test_a_registered_experiment_runs_with_its_context(tmp_path):
    seen = {}

    @register
    class Probe(Experiment):
        name = "h5_probe"
        quick = {"a": 1}
        full = {"a": 2}
        seeds = 3

        def run(self, ctx: RunContext) -> dict:
            seen.update(config=ctx.config, seeds=ctx.seeds, is_main=ctx.is_main, world=ctx.world_size)
            ctx.save_json("extra/part.json", {"x": 1.5})
            return {"ok": True}

    try:
        doc = run_experiment("h5_probe", preset="full", out=tmp_path, show_progress=False)
    finally:
        reg._REGISTRY.pop("h5_probe")
    assert seen == {"config": {"a": 2}, "seeds": [0, 1, 2], "is_main": True, "world": 1}
    assert doc["results"] == {"ok": True}
    assert json.loads((tmp_path / "extra" / "part.json").read_text()) == {"x": 1.5}


def test_missing_data_says_what_to_install():
    e = MissingData("Fashion-MNIST", install="apt-get install dataset-fashion-mnist", fallback="sklearn digits")
    assert isinstance(e, RuntimeError)
    assert str(e) == ("Fashion-MNIST is not available. Install it with: apt-get install dataset-fashion-mnist. "
                      "Otherwise the experiment falls back to sklearn digits.")
    assert e.install.startswith("apt-get") and e.fallback == "sklearn digits"
    assert "Path: give --csv." in str(MissingData("ETTh1", path="give --csv"))
    with pytest.raises(TypeError, match="non-empty string"):
        MissingData("")


def test_progress_bar_with_eta_goes_to_stderr(tmp_path, capsys):
    run_experiment("tiny", out=tmp_path, overrides={"epochs": 1, "n_train": 64, "n_val": 32})
    cap = capsys.readouterr()
    assert "reverser-seed0" in cap.err and "100%" in cap.err
    assert re.search(r"\d\d:\d\d<\d\d:\d\d", cap.err)  # elapsed<remaining: the ETA
    assert "reverser" not in cap.out


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_a_gpu_is_refused_before_any_work(tmp_path):
    with pytest.raises(SetupError, match="--device cuda: torch sees no CUDA device"):
        run_experiment("tiny", out=tmp_path / "x", device="cuda")
    assert not (tmp_path / "x").exists()


def test_set_rejects_a_key_the_preset_does_not_have(capsys):
    with pytest.raises(SystemExit) as e:
        main(["experiment", "tiny", "--set", "epoch=2"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "tiny --quick has no configuration key 'epoch'" in err and "epochs" in err
