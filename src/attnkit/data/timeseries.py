"""Forecasting data without leakage: chronological splits, a scaler fitted on training rows only,
and input/target windows that never cross a split boundary.

The conventions of the published long-horizon tables (Informer, Zhou et al. 2021,
https://arxiv.org/abs/2012.07436; Autoformer, Wu et al. 2021, https://arxiv.org/abs/2106.13008):

* ETT hourly files: the first 12 months train, the next 4 validate, the next 4 test (30-day months,
  so 8,640 / 2,880 / 2,880 rows; four times that for the 15-minute files);
* other series: 70 % / 10 % / 20 % of the rows, in time order;
* a z-score per column with mean and standard deviation taken from the training rows only; the
  tables report MSE/MAE on these scaled values.

Window policy (``windows=``): ``"strict"`` (default) keeps every step of a window, inputs and
targets, inside one split. ``"standard"`` is the published code's: targets inside the split, the
input allowed to start up to ``input_len`` steps earlier, in the previous split (the past, never the
future), which gives the validation and test splits ``input_len`` more windows. No policy lets a
target step fall outside its split.

Shape legend: T rows (time steps), C columns (channels), C_k known-future covariates,
T_in input length, T_out horizon, N windows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch.utils.data import Dataset

WINDOW_POLICIES = ("strict", "standard")
FEATURES = ("S", "M")


@dataclass
class Series:
    """A multichannel series in original units, oldest row first."""

    name: str
    values: np.ndarray  # (T, C) float64
    columns: list[str]
    timestamps: np.ndarray | None = None  # (T,) datetime64, local time
    period: int | None = None  # main seasonal period in steps (seasonal naive)
    lags_of_interest: dict[str, int] = field(default_factory=dict)  # {"daily": 48, "weekly": 336}
    known: np.ndarray | None = None  # (T, C_k) covariates known in advance (calendar, holidays)
    known_names: list[str] = field(default_factory=list)
    split: str = "ratio"  # "ett_hourly", "ett_15min" or "ratio": how to cut train/val/test
    source: str = ""

    def __post_init__(self):
        v = np.asarray(self.values, dtype=np.float64)
        if v.ndim == 1:
            v = v[:, None]
        if v.ndim != 2 or v.shape[1] != len(self.columns):
            raise ValueError(f"values must be (T, C) with C = len(columns) = {len(self.columns)}, got {v.shape}")
        if not np.isfinite(v).all():
            bad = sorted({self.columns[j] for j in np.argwhere(~np.isfinite(v))[:, 1]})
            raise ValueError(f"series {self.name!r} has missing or infinite values in columns {bad}; fill them first")
        self.values = v


@dataclass(frozen=True)
class SplitBorders:
    """Row ranges [start, end) of the three splits; contiguous and in time order."""

    train: tuple[int, int]
    val: tuple[int, int]
    test: tuple[int, int]

    def __post_init__(self):
        if not (0 <= self.train[0] < self.train[1] <= self.val[0] < self.val[1] <= self.test[0] < self.test[1]):
            raise ValueError(f"splits must be non-empty and ordered train < val < test, got {self}")

    def as_dict(self) -> dict[str, tuple[int, int]]:
        return {"train": self.train, "val": self.val, "test": self.test}


def ett_borders(n_rows: int, steps_per_hour: int = 1) -> SplitBorders:
    """12 / 4 / 4 months of 30 days (Informer's ETT split); ``steps_per_hour`` 4 for ETTm files."""
    month = 30 * 24 * steps_per_hour
    need = 20 * month
    if n_rows < need:
        raise ValueError(
            f"the ETT split needs 20 months = {need} rows at {steps_per_hour} step(s) per hour, got {n_rows}; "
            "give a full ETT file or use ratio_borders"
        )
    return SplitBorders((0, 12 * month), (12 * month, 16 * month), (16 * month, 20 * month))


def ratio_borders(n_rows: int, train: float = 0.7, test: float = 0.2) -> SplitBorders:
    """First ``train`` of the rows, last ``test``, validation between (Autoformer's custom-data split)."""
    n_train, n_test = int(n_rows * train), int(n_rows * test)
    return SplitBorders((0, n_train), (n_train, n_rows - n_test), (n_rows - n_test, n_rows))


def borders_for(series: Series) -> SplitBorders:
    n = len(series.values)
    if series.split == "ett_hourly":
        return ett_borders(n, 1)
    if series.split == "ett_15min":
        return ett_borders(n, 4)
    return ratio_borders(n)


class StandardScaler:
    """Per-column z-score; :meth:`fit` is handed the training rows and nothing else."""

    def __init__(self):
        self.mean: np.ndarray | None = None
        self.std: np.ndarray | None = None

    def fit(self, train_values: np.ndarray) -> "StandardScaler":
        x = np.asarray(train_values, dtype=np.float64)
        self.mean = x.mean(axis=0)
        std = x.std(axis=0)
        self.std = np.where(std > 0, std, 1.0)  # a constant column stays at 0 instead of dividing by 0
        return self

    def _check(self):
        if self.mean is None:
            raise RuntimeError("StandardScaler is not fitted; call fit(train_rows) first")

    def transform(self, x: np.ndarray) -> np.ndarray:
        self._check()
        return (x - self.mean) / self.std

    def inverse(self, x, columns: list[int] | None = None):
        """Scaled values (..., len(columns)) back to original units; works on arrays and tensors."""
        self._check()
        cols = slice(None) if columns is None else list(columns)
        mean, std = self.mean[cols], self.std[cols]
        if isinstance(x, torch.Tensor):
            return x * torch.as_tensor(std, dtype=x.dtype) + torch.as_tensor(mean, dtype=x.dtype)
        return x * std + mean


class WindowDataset(Dataset):
    """Windows whose targets lie in rows [start, end) and whose inputs start at or after ``input_floor``.

    Item i is ``(past (T_in, C_in), future_known (T_out, C_k), target (T_out, C_out))`` as float32;
    ``future_known`` has C_k = 0 columns when the series has no known covariates. With
    ``past_known`` the covariates of the input rows are appended to ``past`` (C_in = C + C_k): the
    encoder then knows the time of day of every past step, as Informer's ``x_mark_enc`` does.
    """

    def __init__(self, values, known, targets, start, end, input_len, horizon, input_floor=None, stride=1, split="",
                 past_known=False):
        self.split = split  # "train", "val" or "test": lets callers (and leakage tests) see which split is read
        self.past_known = past_known
        self.values = torch.as_tensor(values, dtype=torch.float32)  # (T, C)
        T = self.values.shape[0]
        self.known = torch.as_tensor(known, dtype=torch.float32) if known is not None else torch.zeros(T, 0)
        self.targets = list(targets)
        self.input_len, self.horizon = input_len, horizon
        self.start, self.end = start, end
        # window i: inputs [i, i + T_in), targets [i + T_in, i + T_in + T_out); a floor below
        # start - T_in would put targets before the split, so it is clamped there
        first = max(0, start - input_len, start if input_floor is None else input_floor)
        last = end - input_len - horizon  # inclusive: the last target row is end - 1
        self.starts = np.arange(first, last + 1, stride, dtype=np.int64) if last >= first else np.zeros(0, np.int64)

    def __len__(self) -> int:
        return len(self.starts)

    def bounds(self, i: int) -> tuple[int, int, int]:
        """(first input row, first target row, end row exclusive) of window i."""
        s = int(self.starts[i])
        return s, s + self.input_len, s + self.input_len + self.horizon

    def __getitem__(self, i: int):
        s, t, e = self.bounds(i)
        past = torch.cat([self.values[s:t], self.known[s:t]], dim=1) if self.past_known else self.values[s:t]
        return past, self.known[t:e], self.values[t:e, self.targets]


@dataclass
class ForecastData:
    """Scaled splits ready for training, plus what is needed to read results in original units."""

    series: Series
    borders: SplitBorders
    scaler: StandardScaler
    columns: list[str]  # the input channels, in order
    targets: list[int]  # input-channel indices that are forecast
    input_len: int
    horizon: int
    features: str
    windows: str
    train: WindowDataset
    val: WindowDataset
    test: WindowDataset

    @property
    def target_names(self) -> list[str]:
        return [self.columns[j] for j in self.targets]

    @property
    def known_channels(self) -> int:
        return self.train.known.shape[1]

    @property
    def in_channels(self) -> int:
        """Channels of ``past``: the value columns, then the known covariates when they are inputs too."""
        return len(self.columns) + (self.known_channels if self.train.past_known else 0)

    def to_original(self, y_scaled):
        """Forecasts or targets (..., C_out) from the scaled space to original units."""
        return self.scaler.inverse(y_scaled, self.targets)


def _require_int(name: str, value, minimum: int, fix: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}; {fix}")
    return int(value)


def prepare(
    series: Series,
    input_len: int,
    horizon: int,
    *,
    features: str = "M",
    target: str | None = None,
    windows: str = "strict",
    borders: SplitBorders | None = None,
    train_stride: int = 1,
    eval_stride: int = 1,
    past_known: bool = False,
) -> ForecastData:
    """Split, scale on the training rows only, and cut windows; every bad argument gets its own error.

    ``features="M"``: every column in and out (the multivariate tables); ``"S"``: the target alone.
    ``target``: the column forecast under "S" (default: the last column, ETT's ``OT`` convention).
    ``past_known``: append the known covariates of the input rows to ``past`` (after the values).
    """
    if not isinstance(series, Series):
        raise TypeError(f"series must be an attnkit.data.timeseries.Series, got {type(series).__name__}")
    input_len = _require_int("input_len", input_len, 1, "the model needs at least one past step (e.g. --input-len 96)")
    horizon = _require_int("horizon", horizon, 1, "forecast at least one step ahead (e.g. --horizon 24)")
    train_stride = _require_int("train_stride", train_stride, 1, "use 1 for every window")
    eval_stride = _require_int("eval_stride", eval_stride, 1, "use 1 for every window")
    if features not in FEATURES:
        raise ValueError(f"features must be 'S' (target only) or 'M' (all columns), got {features!r}")
    if windows not in WINDOW_POLICIES:
        raise ValueError(f"windows must be one of {list(WINDOW_POLICIES)}, got {windows!r}")
    target = series.columns[-1] if target is None else target
    if target not in series.columns:
        raise ValueError(f"unknown target {target!r}; the series {series.name!r} has columns {series.columns}")
    b = borders if borders is not None else borders_for(series)
    if b.test[1] > len(series.values):
        raise ValueError(f"borders end at row {b.test[1]} but the series has {len(series.values)} rows")
    # the window needs input_len + horizon rows inside a split (strict) or horizon rows (standard)
    for split in ("test", "val", "train"):  # the test split first: "horizon longer than the test split" is the usual case
        s, e = getattr(b, split)
        need = horizon + (input_len if windows == "strict" or split == "train" else 0)
        if e - s < need:
            raise ValueError(
                f"the {split} split has {e - s} rows, too few for one window of input_len={input_len} + "
                f"horizon={horizon} ({need} rows needed under windows={windows!r}); shorten the horizon or input"
            )
    cols = [series.columns.index(target)] if features == "S" else list(range(len(series.columns)))
    raw = series.values[:, cols]
    scaler = StandardScaler().fit(raw[b.train[0] : b.train[1]])  # the training rows, and only those
    scaled = scaler.transform(raw)
    targets = [cols.index(series.columns.index(target))] if features == "S" else list(range(len(cols)))

    def make(split: str, stride: int) -> WindowDataset:
        s, e = getattr(b, split)
        floor = s if windows == "strict" or split == "train" else s - input_len
        return WindowDataset(scaled, series.known, targets, s, e, input_len, horizon, input_floor=floor, stride=stride, split=split,
                             past_known=past_known and series.known is not None)

    return ForecastData(
        series, b, scaler, [series.columns[j] for j in cols], targets, input_len, horizon, features, windows,
        make("train", train_stride), make("val", eval_stride), make("test", eval_stride),
    )


def calendar_features(timestamps: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """sin/cos of time of day, day of week and day of year: (T, 6), known for any future step."""
    ts = np.asarray(timestamps, dtype="datetime64[s]")
    days = ts.astype("datetime64[D]")
    tod = (ts - days).astype(np.int64) / 86400.0  # fraction of the day
    dow = ((days.astype(np.int64) + 3) % 7) / 7.0  # 1970-01-01 was a Thursday: Monday = 0
    doy = (days - days.astype("datetime64[Y]")).astype(np.int64) / 365.25
    feats, names = [], []
    for name, frac in (("day", tod), ("week", dow), ("year", doy)):
        feats += [np.sin(2 * np.pi * frac), np.cos(2 * np.pi * frac)]
        names += [f"{name}_sin", f"{name}_cos"]
    return np.stack(feats, axis=1), names
