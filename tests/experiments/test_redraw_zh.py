"""``python -m attnkit.experiments.redraw_zh``: the Chinese copies of committed runs' figures, drawn
again from their ``results.json`` by the experiments' own plot code.

Checked on copies of committed runs (``results/<experiment>/<run>/``): every figure whose numbers
``results.json`` holds gets a ``zh/`` copy at least 1,000 px wide, the English files are left
byte for byte (unless ``--english``), each figure's text is Chinese in the copy and English in the
original, every glyph is found in a font (matplotlib warns "Glyph ... missing" otherwise), and bad
arguments get one clear error.
"""

from __future__ import annotations

import re
import shutil
import warnings
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from attnkit.experiments.lab.committed import committed_runs  # noqa: E402
from attnkit.experiments.redraw_zh import main  # noqa: E402
from attnkit.page.figures import cjk_font, language  # noqa: E402

COMMITTED = Path(__file__).resolve().parents[2] / "results"
# one committed run per experiment that has figures drawn from numbers: (experiment, run, figures redrawn)
RUNS = [("seq2seq", "dates-full", {"metric_vs_length.png", "training_curves.png", "alignments_bahdanau.png",
                                   "alignments_luong.png", "alignments_transformer.png"}),
        ("forecast", "vic_elec-full", {"attention_lag_in336_h48.png", "forecast_in336_h48.png"}),
        ("vision", "full", {"accuracy_vs_cost.png", "mhsa_query.png", "vit_attention.png",  # the maps: from the viewers' weights
                            "gates_se.png", "gates_eca.png", "gates_cbam.png", "cbam_spatial.png"})]
CJK = re.compile(r"[\u3400-\u9fff]")
MISSING_GLYPH = ".*missing from font"  # matplotlib's warning when it draws a box where a character should be

needs_font = pytest.mark.skipif(cjk_font() is None, reason="no CJK font on this machine (apt-get install fonts-noto-cjk)")


def _copy(tmp_path: Path, experiment: str, run: str) -> Path:
    src = COMMITTED / experiment / run
    if not (src / "results.json").is_file():
        pytest.skip(f"committed run {experiment}/{run} not in this checkout")
    dest = tmp_path / experiment / run
    dest.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file():  # results.json and the English figures, not an earlier zh/ or checkpoints/
            shutil.copy2(f, dest / f.name)
    return dest


def _texts(fig) -> str:
    """Every piece of text a figure shows: titles, axis labels, tick labels, legends, colour bars."""
    return " ".join(t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text") and hasattr(a, "get_fontname")))


@needs_font
@pytest.mark.parametrize("experiment, run, expected", RUNS)
def test_chinese_copies_are_written_and_the_english_files_left_alone(tmp_path, experiment, run, expected):
    from PIL import Image

    folder = _copy(tmp_path, experiment, run)
    before = {p.name: p.read_bytes() for p in folder.glob("*.png")}
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=MISSING_GLYPH)  # the copies are drawn in the CJK font
        assert main(["--results", str(tmp_path), "--runs", f"{experiment}/{run}"]) == 0
    written = {p.name for p in (folder / "zh").glob("*.png")}
    assert written == expected
    for name in written:
        with Image.open(folder / "zh" / name) as im:
            assert im.width >= 1000, name
        assert (folder / "zh" / name).read_bytes() != before.get(name), name  # a drawing of its own, not a copy
    assert {p.name: p.read_bytes() for p in folder.glob("*.png")} == before


@needs_font
def test_english_redraws_the_english_files_too(tmp_path):
    folder = _copy(tmp_path, "forecast", "vic_elec-full")
    for name in ("attention_lag_in336_h48.png", "forecast_in336_h48.png"):
        (folder / name).write_bytes(b"stale")  # as if drawn by another version
    assert main(["--results", str(tmp_path), "--english"]) == 0
    assert (folder / "zh" / "attention_lag_in336_h48.png").is_file()
    for name in ("attention_lag_in336_h48.png", "forecast_in336_h48.png"):
        assert (folder / name).read_bytes().startswith(b"\x89PNG"), name  # drawn again by this version
    assert (folder / "zh" / "forecast_in336_h48.png").is_file()  # the curves, from the numbers the run stored


@needs_font
@pytest.mark.parametrize("experiment, run, expected", RUNS)
def test_each_figure_reads_in_its_language_with_every_glyph_in_a_font(tmp_path, experiment, run, expected):
    import importlib

    import matplotlib.pyplot as plt

    folder = _copy(tmp_path, experiment, run)
    results = committed_runs(experiment, tmp_path)[run]
    figures = importlib.import_module(f"attnkit.experiments.{experiment}.plots").run_figures(results)
    assert {name for name, _ in figures} == expected
    for name, draw in figures:
        fig = draw("en")
        assert not CJK.search(_texts(fig)), name
        plt.close(fig)
        with warnings.catch_warnings(), language("zh"):
            warnings.filterwarnings("error", message=MISSING_GLYPH)
            fig = draw("zh")
            fig.savefig(folder / "check.png", dpi=50)
            assert CJK.search(_texts(fig)), name
            plt.close(fig)


def test_bad_arguments_get_one_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["--results", str(tmp_path / "missing")])
    assert e.value.code == 2 and "no folder" in capsys.readouterr().err
    _copy(tmp_path, "forecast", "vic_elec-full")
    if cjk_font() is None:
        return
    with pytest.raises(SystemExit) as e:
        main(["--results", str(tmp_path), "--runs", "forecast/nope"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "forecast/nope" in err and "forecast/vic_elec-full" in err  # names the runs there


def _store(folder: Path, change) -> None:
    """Edit the copied run's results.json in place: ``change(results)`` adds what a run of this version stores."""
    import json

    path = folder / "results.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    change(doc["results"])
    path.write_text(json.dumps(doc), encoding="utf-8")


def _curves(results: dict) -> None:
    st = next(iter(results["settings"].values()))
    horizon = st["horizon"]
    st["curves"] = {"channel": "demand", "windows": [
        {"index": i, "history": [float(j % 48) for j in range(3 * horizon)], "truth": [1.0] * horizon,
         "models": {m: [2.0 + k] * horizon for k, m in enumerate(st["models"])}} for i in (0, 50, 99)]}


def _gates(results: dict) -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    results["plotted_gates"] = {
        "channel": {n: {"gate": "stage3", "classes": ["Trouser", "Bag", "Coat"], "per_class": rng.random((3, 16)).tolist()}
                    for n in ("se", "eca", "cbam")},
        "spatial": {"classes": ["Trouser", "Bag", "Coat", "Sandal"], "gates": rng.random((4, 8, 8)).tolist(),
                    "images": rng.random((4, 28, 28)).tolist()}}


# runs of this version store the numbers of every figure: (experiment, run, what the run stores, figures added)
STORED = [("forecast", "vic_elec-full", _curves, {"forecast_in336_h48.png"}),
          ("vision", "full", _gates, {"gates_se.png", "gates_eca.png", "gates_cbam.png", "cbam_spatial.png"})]


@needs_font
@pytest.mark.parametrize("experiment, run, store, added", STORED)
def test_figures_whose_numbers_a_run_stores_are_drawn_again_in_chinese(tmp_path, experiment, run, store, added):
    import importlib

    import matplotlib.pyplot as plt
    from PIL import Image

    folder = _copy(tmp_path, experiment, run)
    _store(folder, store)
    expected = dict((e, x) for e, _, x in RUNS)[experiment] | added
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=MISSING_GLYPH)
        assert main(["--results", str(tmp_path), "--runs", f"{experiment}/{run}"]) == 0
    assert {p.name for p in (folder / "zh").glob("*.png")} == expected
    for name in added:
        with Image.open(folder / "zh" / name) as im:
            assert im.width >= 1000, name
    results = committed_runs(experiment, tmp_path)[run]
    figures = dict(importlib.import_module(f"attnkit.experiments.{experiment}.plots").run_figures(results))
    for name in added:
        with language("zh"):
            fig = figures[name]("zh")
            assert CJK.search(_texts(fig)), name
            plt.close(fig)
