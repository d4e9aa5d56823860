"""``attnkit experiment forecast`` on a small synthetic half-hourly CSV: results.json has MSE/MAE
(scaled and original units), parameters and training time per model and horizon; the test split is
read only after training (never for early stopping); ``kill -9`` then ``--resume`` loses no finished
epoch and ends with the same metrics as an uninterrupted run; bad inputs fail before training with
one clear error each; the report's reading says plainly whether attention helped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from attnkit.experiments import Results, SetupError, run_experiment
from attnkit.experiments.forecast import train as F
from attnkit.experiments.forecast.plots import published_for, reading

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
TINY = {"epochs": 5, "max_train_windows": 192, "train_stride": 1, "eval_stride": 4, "width": 8,
        "input_len": [64], "horizon": [8], "batch_size": 32}


def _csv(path: Path, n: int = 1200) -> Path:
    import pandas as pd

    t = pd.date_range("2020-01-01", periods=n, freq="30min")  # half-hourly: daily period 48, 70/10/20 split
    rng = np.random.default_rng(0)
    load = np.sin(2 * np.pi * np.arange(n) / 48) + 0.1 * rng.normal(size=n)
    pd.DataFrame({"date": t.strftime("%Y-%m-%d %H:%M:%S"), "temp": rng.normal(size=n), "load": load}).to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def csv(tmp_path_factory) -> Path:
    return _csv(tmp_path_factory.mktemp("data") / "synth.csv")


def _run(csv, out, **extra):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the subprocesses below run with one thread: bit-exact comparisons need the same
    try:
        return run_experiment("forecast", out=out, overrides={**TINY, "data": str(csv), **extra}, show_progress=False)
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def reference(csv, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reference")
    _run(csv, out, models=["naive", "seasonal_naive", "dlinear", "lstm_attention"])
    return out


def test_results_json_has_every_model_metric_and_the_plots(reference):
    doc = json.loads((reference / "results.json").read_text())
    st = doc["results"]["settings"]["in64_h8"]
    assert st["windows"]["policy"] == "strict" and st["target"] == ["load"]
    for name in ("naive", "seasonal_naive", "dlinear", "lstm_attention"):
        m = st["models"][name]
        for key in ("mse", "mae", "mse_orig[load]", "mae_orig[load]", "params", "train_s", "infer_s_per_1k_windows"):
            assert np.isfinite(m[key]["mean"]) and np.isfinite(m[key]["std"]), (name, key)
    assert st["models"]["naive"]["params"]["mean"] == 0 and st["models"]["dlinear"]["params"]["mean"] == 2 * (64 * 8 + 8)
    # on a daily sine the value one day ago beats the last value
    assert st["models"]["seasonal_naive"]["mse"]["mean"] < st["models"]["naive"]["mse"]["mean"]
    att = st["attention"]
    assert att["lags_of_interest"]["daily"]["lag"] == 48 and len(att["mean_weight_by_lag"]) == 64 + 8 - 1
    np.testing.assert_allclose(np.array(att["heatmap"]).sum(1), 1.0, atol=1e-3)
    assert (reference / "forecast_in64_h8.png").is_file() and (reference / "attention_lag_in64_h8.png").is_file()
    section = F.ForecastExperiment().report(Results(doc["results"], reference, doc), reference)
    assert "Lowest test MSE (scaled)" in section.html and "Attention versus lag" in section.html
    assert "beat seasonal_naive" in section.html and section.html.count("<img") == 2


def test_the_run_draws_its_figures_in_english_and_chinese(reference):
    from attnkit.page.figures import cjk_font, zh_path

    if cjk_font() is None:
        pytest.skip("no CJK font on this machine (apt-get install fonts-noto-cjk)")
    for name in ("forecast_in64_h8.png", "attention_lag_in64_h8.png"):
        png = reference / name
        assert zh_path(png).is_file() and zh_path(png).read_bytes() != png.read_bytes(), name


def test_committed_runs_are_read_first_in_either_language(reference):
    from attnkit.experiments.forecast.section import summary_row

    doc = json.loads((reference / "results.json").read_text())
    # the quick reference run stands in for a committed --full one (a committed --quick run is headed "quick")
    run = Results(doc["results"], reference, {**{k: v for k, v in doc.items() if k != "results"}, "preset": "full"})
    own = Results(json.loads(json.dumps(doc["results"])), reference, {})
    own["settings"]["in64_h8"]["models"]["dlinear"]["mse"]["mean"] = 9.0  # tell the two runs apart in the html
    for lang, committed, own_run, said in (("en", "Every model, column and figure of ETTh1 oil temperature (long run)", "This report’s own run", "Lowest test MSE"),
                                          ("zh", "全部模型、列与图：ETTh1 油温（长时间运行）", "本报告自己的运行", "测试 MSE（标准化）最低的是")):
        html = F.ForecastExperiment().report(own, reference, lang, full_results={"etth1-full": run}).html
        assert html.index(committed) < html.index(own_run) < html.index("9.0000 ± "), lang
        # the committed run leads (main flow), then folded: its every table and figure, then the report's own run
        assert html.count(said) == 3 and html.count("<img") == 6, lang
    measured, meaning = summary_row(own, "zh", full_results={"etth1-full": run})
    assert measured.startswith("etth1-full in64_h8：最好 ") and "9.000" not in measured  # the committed run, not the quick one
    assert "种子" in meaning


def test_test_split_is_read_only_after_training(csv, tmp_path, monkeypatch):
    from attnkit.experiments.lab.context import RunContext

    events = []
    real_predict, real_fit = F.predict, RunContext.fit

    def spy_predict(model, ds, *a, **k):
        events.append(("read", ds.split))
        return real_predict(model, ds, *a, **k)

    def spy_fit(self, *a, **k):
        events.append(("fit", "start"))
        try:
            return real_fit(self, *a, **k)
        finally:
            events.append(("fit", "end"))

    monkeypatch.setattr(F, "predict", spy_predict)
    monkeypatch.setattr(RunContext, "fit", spy_fit)
    _run(csv, tmp_path, models=["dlinear", "lstm"], epochs=2)
    inside = False
    for kind, what in events:
        if kind == "fit":
            inside = what == "start"
        elif inside:
            assert what == "val", f"the {what} split was read during training"
        else:
            assert what == "test"
    assert ("read", "val") in events and events.count(("read", "test")) == 2


def test_early_stopping_fires_and_cannot_see_the_test_rows(tmp_path):
    """Early stopping (patience 1) stops before the last epoch, and replacing the test rows by noise
    changes the test MSE but not the epoch it stopped at nor the epoch it kept: the monitor read the
    validation split only."""
    import pandas as pd

    df = pd.read_csv(_csv(tmp_path / "a.csv"))  # 1,200 rows, 70/10/20: the test rows are 960..1199
    noisy = df.copy()
    noisy.loc[1000:, "load"] = 3.0 * np.random.default_rng(1).normal(size=len(df) - 1000)
    noisy.to_csv(tmp_path / "b.csv", index=False)
    kw = {"models": ["dlinear"], "epochs": 12, "patience": 1, "lr": 0.05, "lr_decay": 1.0, "train_overrides": {}}
    runs = []
    for name in ("a", "b"):
        _run(tmp_path / f"{name}.csv", tmp_path / f"run_{name}", **kw)
        doc = json.loads((tmp_path / f"run_{name}" / "results.json").read_text())
        runs.append(doc["results"]["settings"]["in64_h8"]["models"]["dlinear"])
    a, b = runs
    assert a["epochs"]["runs"][0] < 12, "early stopping did not fire: the test proves nothing"
    assert a["epochs"]["runs"] == b["epochs"]["runs"] and a["best_epoch"]["runs"] == b["best_epoch"]["runs"]
    assert abs(a["mse"]["mean"] - b["mse"]["mean"]) > 0.1  # the test rows did change, and were read after training


def _metrics(out: Path) -> dict:
    doc = json.loads((out / "results.json").read_text())["results"]["settings"]
    return {s: {m: {k: v["runs"] for k, v in d.items() if isinstance(v, dict) and not k.endswith("_s")
                    and not k.startswith("infer")} for m, d in st["models"].items()} for s, st in doc.items()}


def test_kill_9_mid_training_then_resume_equals_an_uninterrupted_run(csv, tmp_path, reference):
    out = tmp_path / "run"
    args = [sys.executable, "-m", "attnkit.cli", "experiment", "forecast", "--no-progress", "--out", str(out),
            "--data", str(csv), "--models", "naive", "seasonal_naive", "dlinear", "lstm_attention",
            *[a for k, v in TINY.items() for a in ("--set", f"{k}={json.dumps(v)}")]]
    proc = subprocess.Popen(args, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpt = out / "checkpoints" / "in64_h8-lstm_attention-seed0.pt"
    deadline = time.time() + 120
    while not ckpt.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    state = torch.load(ckpt, weights_only=False)
    assert not state["finished"] and state["epoch"] >= 1, "the kill must land mid-run"
    before = [{k: v for k, v in r.items() if k != "time_s"} for r in state["history"]]
    done = subprocess.run([*args, "--resume"], env=ENV, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    after = torch.load(ckpt, weights_only=False)["history"]
    assert [{k: v for k, v in r.items() if k != "time_s"} for r in after[: len(before)]] == before  # no finished epoch lost
    assert _metrics(out) == _metrics(reference)


@pytest.mark.parametrize("extra,message", [
    ({"input_len": [0]}, "input_len must be >= 1, got 0"),
    ({"horizon": [400]}, "the test split has 240 rows, too few"),
    ({"target": "OT"}, r"unknown target 'OT'; the series 'synth' has columns \['temp', 'load'\]"),
])
def test_bad_settings_fail_before_training_with_one_clear_error(csv, tmp_path, extra, message):
    with pytest.raises(SetupError, match=message):
        _run(csv, tmp_path, **extra)
    assert not (tmp_path / "checkpoints").exists()


def test_bad_csv_files_fail_with_one_clear_error(tmp_path):
    (tmp_path / "nodate.csv").write_text("time,a\n2020-01-01,1\n")
    (tmp_path / "text.csv").write_text("date,a,b\n2020-01-01,1,x\n2020-01-02,2,y\n")
    with pytest.raises(SetupError, match="no 'date' column"):
        _run(tmp_path / "nodate.csv", tmp_path / "o1")
    with pytest.raises(SetupError, match=r"non-numeric columns \['b'\]"):
        _run(tmp_path / "text.csv", tmp_path / "o2")
    with pytest.raises(SetupError, match="is not available"):
        _run(tmp_path / "absent.csv", tmp_path / "o3")


def _setting(lstm, att, seeds=3):
    models = {"lstm": {"seeds": seeds, "mse": {"mean": lstm[0], "std": lstm[1]}},
              "lstm_attention": {"seeds": seeds, "mse": {"mean": att[0], "std": att[1]}}}
    return {"models": models, "attention": None, "published": []}


def test_the_reading_says_plainly_whether_attention_helped():
    worse = " ".join(reading(_setting((0.30, 0.01), (0.35, 0.01)), "vic_elec"))
    assert "Temporal attention did not help the LSTM here, it hurt" in worse and "beyond 2σ of the seed spread" in worse
    better = " ".join(reading(_setting((0.30, 0.01), (0.25, 0.01)), "vic_elec"))
    assert "Temporal attention helped the LSTM: MSE 0.3000 without, 0.2500 with (16.7 % lower)" in better
    noise = " ".join(reading(_setting((0.30, 0.05), (0.29, 0.05)), "vic_elec"))
    assert "did not clearly help" in noise and "within 2σ of the seed spread" in noise
    one_seed = " ".join(reading(_setting((0.30, 0.0), (0.25, 0.0), seeds=1), "vic_elec"))
    assert "did not clearly help" in one_seed and "with one seed" in one_seed  # never "helped" without a spread
    st = _setting((0.45, 0.01), (0.50, 0.01))
    st["models"]["lstm"]["mae"] = {"mean": 0.42, "std": 0.0}
    st["published"] = [{"model": "PatchTST/42", "input_len": 336, "mse": 0.375, "mae": 0.399}]
    gap = " ".join(reading(st, "ETTh1"))
    assert "our best, lstm, 0.4500 is above it by 0.0750 (MAE 0.4200 vs 0.399: above by 0.0210)" in gap


def test_published_numbers_are_stated_as_published():
    rows = {r["model"]: r for r in published_for("ETTh1", "M", 336, 96)}
    assert (rows["PatchTST/42"]["mse"], rows["PatchTST/42"]["mae"]) == (0.375, 0.399)
    assert (rows["PatchTST/64"]["input_len"], rows["PatchTST/64"]["mse"]) == (512, 0.370)
    assert published_for("ETTh1", "M", 96, 24)[0]["mse"] == 0.577  # Informer, input length searched
    assert {r["model"]: r["mse"] for r in published_for("ETTh1", "M", 96, 96)} == {"PatchTST": 0.414, "DLinear": 0.386}
    assert published_for("vic_elec", "S", 336, 48) == []


def test_the_plotted_curves_are_stored_in_results_json_and_drawn_from_them(csv, reference):
    """The forecast figure's numbers sit in results.json, in original units: history + truth is a
    stretch of the CSV's own column, the naive forecast repeats the last history value, and the
    figure drawn from them (either language) plots exactly those numbers."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from attnkit.experiments.forecast.plots import forecast_figure, run_figures

    st = json.loads((reference / "results.json").read_text())["results"]["settings"]["in64_h8"]
    curves = st["curves"]
    assert curves["channel"] == "load" and len(curves["windows"]) == 3
    load = pd.read_csv(csv)["load"].to_numpy()
    for win in curves["windows"]:
        assert len(win["history"]) == min(64, 3 * 8) and len(win["truth"]) == 8
        assert set(win["models"]) == {"naive", "seasonal_naive", "dlinear", "lstm_attention"}
        seen = np.array(win["history"] + win["truth"])
        starts = [s for s in range(len(load) - len(seen) + 1) if np.allclose(load[s : s + len(seen)], seen, rtol=1e-4, atol=1e-4)]
        assert len(starts) == 1, win["index"]  # one contiguous stretch of the raw column
        np.testing.assert_allclose(win["models"]["naive"], win["history"][-1], rtol=1e-4)
    for lang in ("en", "zh"):
        fig = forecast_figure(curves, lang)
        ys = [line.get_ydata() for line in fig.axes[0].get_lines()]
        w0 = curves["windows"][0]
        assert [list(y) for y in ys] == [w0["history"], w0["truth"], *w0["models"].values()]
        plt.close(fig)
    assert {name for name, _ in run_figures({"settings": {"in64_h8": st}})} == {"forecast_in64_h8.png", "attention_lag_in64_h8.png"}
    assert run_figures({"settings": {"in64_h8": {**st, "curves": None}}})[0][0] == "attention_lag_in64_h8.png"  # older runs
