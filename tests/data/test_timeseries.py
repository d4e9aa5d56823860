"""Forecasting data: the standard ETT split (8,640 / 2,880 / 2,880 rows), a scaler that is handed the
training rows and nothing else, windows that never cross a split (hypothesis, both policies),
predictions unchanged when the future of an input window is perturbed, the real sources load
offline (vic_elec, co2, ETTh1 when present), and one clear error per bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnkit.data import timeseries as ts
from attnkit.data.timeseries import Series, SplitBorders, StandardScaler, ett_borders, prepare
from attnkit.data.ts_sources import default_ett_path, load_csv, load_series
from attnkit.models.forecasters import ForecastSpec, create_forecaster

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402


def _series(T=400, C=3, seed=0, known=True):
    rng = np.random.default_rng(seed)
    values = np.cumsum(rng.normal(size=(T, C)), axis=0) + np.arange(C) * 10
    k = rng.normal(size=(T, 2)) if known else None
    return Series("toy", values, [f"c{j}" for j in range(C)], known=k, known_names=["a", "b"] if known else [])


def test_ett_split_is_12_4_4_months():
    b = ett_borders(17420)
    assert b == SplitBorders((0, 8640), (8640, 11520), (11520, 14400))
    assert ett_borders(69680, steps_per_hour=4).test == (46080, 57600)


def test_scaler_is_fitted_on_training_rows_only(monkeypatch):
    s = _series()
    b = SplitBorders((0, 200), (200, 300), (300, 400))
    seen = []
    real_fit = StandardScaler.fit
    monkeypatch.setattr(StandardScaler, "fit", lambda self, x: (seen.append(np.array(x)), real_fit(self, x))[1])
    d = prepare(s, 10, 5, borders=b)
    assert len(seen) == 1
    np.testing.assert_array_equal(seen[0], s.values[:200])  # exactly the training rows
    # and a test that fails if any later row leaks in: blow up val/test and nothing changes
    s2 = _series()
    s2.values[200:] *= 1e6
    d2 = prepare(s2, 10, 5, borders=b)
    np.testing.assert_array_equal(d.scaler.mean, d2.scaler.mean)
    np.testing.assert_array_equal(d.scaler.std, d2.scaler.std)
    np.testing.assert_allclose(d.scaler.mean, s.values[:200].mean(0))
    np.testing.assert_allclose(d.scaler.std, s.values[:200].std(0))


@settings(max_examples=30)
@given(n_train=st.integers(30, 80), n_val=st.integers(20, 40), n_test=st.integers(20, 40),
       input_len=st.integers(1, 12), horizon=st.integers(1, 8), stride=st.integers(1, 3),
       windows=st.sampled_from(ts.WINDOW_POLICIES))
def test_no_window_crosses_a_split(n_train, n_val, n_test, input_len, horizon, stride, windows):
    T = n_train + n_val + n_test
    b = SplitBorders((0, n_train), (n_train, n_train + n_val), (n_train + n_val, T))
    d = prepare(_series(T, 2), input_len, horizon, borders=b, windows=windows, train_stride=stride)
    for split in ("train", "val", "test"):
        ds, (s, e) = getattr(d, split), getattr(b, split)
        assert len(ds) > 0
        for i in range(len(ds)):
            first_in, first_target, end = ds.bounds(i)
            assert first_target - first_in == input_len and end - first_target == horizon
            assert s <= first_target and end <= e  # targets always inside the split
            floor = s if windows == "strict" or split == "train" else s - input_len
            assert first_in >= floor  # inputs: inside (strict) or only from the past (standard)
        if stride == 1 or split != "train":  # every admissible window is there, none twice
            assert len(ds) == (e - horizon) - max(0, floor) - input_len + 1


ETT_COLUMNS = ["HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT"]


def _ett_like_csv(tmp_path, rows: int, minutes: int):
    """A CSV in ETT's layout and length (date, six loads, OT), with values that encode their row."""
    dates = np.datetime64("2016-07-01T00:00") + np.arange(rows) * np.timedelta64(minutes, "m")
    values = np.arange(rows)[:, None] + np.arange(len(ETT_COLUMNS)) / 10  # row r, column j -> r + j/10
    lines = ["date," + ",".join(ETT_COLUMNS)]
    lines += [f"{str(d).replace('T', ' ')}:00," + ",".join(f"{x:.1f}" for x in row) for d, row in zip(dates, values)]
    path = tmp_path / "ETTx1.csv"
    path.write_text("\n".join(lines) + "\n")
    return path, values


def _published_counts(steps_per_hour: int, input_len: int, horizon: int) -> tuple[int, int, int]:
    """Informer/Autoformer's Dataset_ETT_hour/_minute: len = border2 - border1 - seq_len - pred_len + 1,
    where val and test start seq_len rows early (12/4/4 months of 30 days)."""
    month = 30 * 24 * steps_per_hour
    train = 12 * month - input_len - horizon + 1
    val = test = (4 * month + input_len) - input_len - horizon + 1  # border2 - border1 = 4 months + seq_len
    return train, val, test


@pytest.mark.parametrize("minutes, rows, split", [(60, 17420, "ett_hourly"), (15, 69680, "ett_15min")])
def test_loader_on_an_ett_shaped_csv(tmp_path, minutes, rows, split):
    path, values = _ett_like_csv(tmp_path, rows, minutes)
    s = load_csv(path)
    assert s.columns == ETT_COLUMNS and s.split == split and s.values.shape == (rows, 7)
    np.testing.assert_array_equal(s.values, values)
    assert s.timestamps[1] - s.timestamps[0] == np.timedelta64(minutes * 60, "s")
    d = prepare(s, 96, 96, windows="standard")
    assert (len(d.train), len(d.val), len(d.test)) == _published_counts(60 // minutes, 96, 96)
    month = 30 * 24 * 60 // minutes
    assert d.borders.test == (16 * month, 20 * month)
    # the first test window reads its input from the 96 rows before the split, its target from the split
    first_in, first_target, end = d.test.bounds(0)
    assert (first_in, first_target, end) == (16 * month - 96, 16 * month, 16 * month + 96)
    past, _, target = d.test[0]
    np.testing.assert_allclose(d.to_original(target).numpy(), values[first_target:end], rtol=1e-6)
    scaled = (values[first_in:first_target] - values[: 12 * month].mean(0)) / values[: 12 * month].std(0)
    np.testing.assert_allclose(past.numpy(), scaled, rtol=1e-5, atol=1e-5)


def test_standard_policy_matches_the_published_window_counts():
    path = default_ett_path()
    if path is None:
        pytest.skip("the real-ETTh1 checks skipped: no ETTh1.csv here; enable with: ATTNKIT_ETT_PATH=/path/to/ETTh1.csv")
    d = prepare(load_csv(path), 96, 96, windows="standard")
    assert (len(d.train), len(d.val), len(d.test)) == _published_counts(1, 96, 96)
    assert _published_counts(1, 96, 96) == (8640 - 192 + 1, 2880 + 96 - 192 + 1, 2880 + 96 - 192 + 1)


@pytest.mark.parametrize("past_known", [False, True])
def test_perturbing_the_future_of_an_input_window_changes_nothing(past_known):
    s = _series(300, 2)
    b = SplitBorders((0, 150), (150, 200), (200, 300))
    d = prepare(s, 24, 6, borders=b, past_known=past_known)
    i = 10
    first_in, first_target, _ = d.test.bounds(i)
    s2 = _series(300, 2)
    s2.values[first_target:] += np.random.default_rng(5).normal(size=s2.values[first_target:].shape) * 100
    if not past_known:
        s2.known[:first_target] += 50.0  # past covariates are not inputs unless past_known
    d2 = prepare(s2, 24, 6, borders=b, past_known=past_known)
    past, known, target = d.test[i]
    past2, known2, target2 = d2.test[i]
    torch.testing.assert_close(past, past2, rtol=0, atol=0)
    assert not torch.equal(target, target2)  # the perturbation did reach the future
    spec = ForecastSpec(24, 6, d.in_channels, targets=(0, 1), known_channels=2, period=12)
    for name in ("naive", "dlinear", "lstm_attention", "patch_transformer"):
        model = create_forecaster(name, spec).eval()
        with torch.no_grad():
            torch.testing.assert_close(model(past[None], known[None]), model(past2[None], known[None]), rtol=0, atol=0)


def test_items_line_up_with_the_rows():
    s = _series(120, 2)
    d = prepare(s, 8, 4, borders=SplitBorders((0, 60), (60, 90), (90, 120)), features="S", target="c0")
    past, known, target = d.val[3]
    a, t, e = d.val.bounds(3)
    scaled = (s.values[:, :1] - s.values[:60, :1].mean(0)) / s.values[:60, :1].std(0)
    np.testing.assert_allclose(past.numpy(), scaled[a:t], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(target.numpy(), scaled[t:e], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(known.numpy(), s.known[t:e], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(d.to_original(target).numpy(), s.values[t:e, :1], rtol=1e-5)
    d2 = prepare(s, 8, 4, borders=SplitBorders((0, 60), (60, 90), (90, 120)), features="S", target="c0", past_known=True)
    past2 = d2.val[3][0]
    assert d2.in_channels == 3 and past2.shape == (8, 3)
    np.testing.assert_allclose(past2[:, 1:].numpy(), s.known[a:t], rtol=1e-6, atol=1e-6)  # covariates of the input rows


def test_calendar_features_mark_monday_midnight():
    feats, names = ts.calendar_features(np.array(["2024-01-01T00:00", "2024-01-01T06:00"], dtype="datetime64[s]"))
    f = dict(zip(names, feats[0]))
    assert f["day_sin"] == pytest.approx(0) and f["day_cos"] == pytest.approx(1) and f["week_sin"] == pytest.approx(0)
    assert dict(zip(names, feats[1]))["day_sin"] == pytest.approx(1)  # a quarter of the day


def test_real_sources_load_offline():
    vic = load_series("vic_elec")
    assert vic.values.shape == (52608, 2) and vic.columns[-1] == "Demand" and vic.period == 48
    assert vic.lags_of_interest == {"daily": 48, "weekly": 336}
    assert vic.known.shape == (52608, 7) and vic.known[:48, -1].all()  # 2012-01-01 was a public holiday
    co2 = load_series("co2")
    assert co2.values.shape == (2284, 1) and np.isfinite(co2.values).all()
    assert co2.values[0, 0] == pytest.approx(316.1)


def test_etth1_loads_with_the_standard_split():
    path = default_ett_path()
    if path is None:
        pytest.skip("the real-ETTh1 checks skipped: no ETTh1.csv here; enable with: ATTNKIT_ETT_PATH=/path/to/ETTh1.csv")
    s = load_csv(path)
    assert s.columns == ["HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT"] and s.split == "ett_hourly"
    d = prepare(s, 96, 24)
    assert d.borders.test == (11520, 14400)
    train_rows = torch.stack([d.train[i][0][0] for i in range(0, len(d.train))])
    assert train_rows.mean(0).abs().max() < 0.05  # scaled on train: ≈ zero mean there


def _csv(tmp_path, text):
    p = tmp_path / "x.csv"
    p.write_text(text)
    return p


def test_bad_inputs_get_one_clear_error_each(tmp_path):
    with pytest.raises(ValueError, match="no 'date' column"):
        load_csv(_csv(tmp_path, "time,a\n2020-01-01,1\n"))
    with pytest.raises(ValueError, match=r"non-numeric columns \['b'\]"):
        load_csv(_csv(tmp_path, "date,a,b\n2020-01-01,1,x\n2020-01-02,2,y\n"))
    from attnkit.data import MissingData

    with pytest.raises(MissingData, match="nope.csv"):
        load_csv(tmp_path / "nope.csv")
    s = _series(200, 2)
    b = SplitBorders((0, 100), (100, 160), (160, 200))
    with pytest.raises(ValueError, match="the test split has 40 rows, too few"):
        prepare(s, 24, 30, borders=b)
    with pytest.raises(ValueError, match="input_len must be >= 1, got 0"):
        prepare(s, 0, 4, borders=b)
    with pytest.raises(ValueError, match=r"unknown target 'OT'; the series 'toy' has columns \['c0', 'c1'\]"):
        prepare(s, 8, 4, borders=b, target="OT", features="S")
    with pytest.raises(ValueError, match="features must be 'S'"):
        prepare(s, 8, 4, borders=b, features="MS")
    with pytest.raises(ValueError, match="unknown data 'ettx'"):
        load_series("ettx")
    with pytest.raises(ValueError, match="missing or infinite values in columns"):
        Series("bad", np.array([[1.0], [np.nan]]), ["a"])
