"""Date normalisation pairs generated with ``babel`` (the Unicode CLDR): "jeudi 7 mars 2024" → "2024-03-07".

The task of the date-translation toy in the attention literature: read a date written the way
people in one of many locales write it, output ISO 8601. Its value here is that the source length
can be *controlled*: every source carries the same information (a day, a month, a year) however
long it is, so a model whose score falls as sources grow is failing to carry information through
its encoder, not facing harder sentences — Bahdanau et al. 2015, https://arxiv.org/abs/1409.0473,
Fig. 2, in a form that trains in seconds.

A source is one date written by :func:`babel.dates.format_date` in a locale and a format, with
filler words added before and after until it reaches a length drawn from ``length_range``:

* locales: 12 Latin-script CLDR locales (day-first numeric forms, month names in each language);
* formats: ``full`` (weekday + day + full month name + year), ``long``, ``medium``, ``short``, and
  ``weekday_medium`` (abbreviated weekday + medium). The short and medium numeric forms use a
  4-digit year (CLDR's ``yy`` would make 1924 and 2024 the same string), and en_US numeric forms
  are left out (``M/d/y`` reads as another locale's ``d/M/y``: without the locale in the source the
  date would be ambiguous and no model could be exact);
* filler words come from :data:`FILLERS`, a neutral list with no month, weekday or digit in it.

Shape legend: pairs are (source, target) strings; lengths are in characters.
"""

from __future__ import annotations

import datetime as _dt
import random

LOCALES = ("en_GB", "en_US", "fr_FR", "de_DE", "es_ES", "it_IT", "pt_BR", "nl_NL", "sv_SE", "pl_PL", "fi_FI", "ro_RO")
FORMATS = ("full", "long", "medium", "short", "weekday_medium")
_CONSONANTS = "bcdfghjklmnpqrstvwxz"
FILLERS = ("ref", "note", "on", "the", "date", "is", "le", "am", "el", "il", "op", "em", "den", "for", "per", "dated", "at", "via")


def _babel():
    try:
        from babel import dates
    except ImportError as e:  # pragma: no cover - babel is a dependency of the experiments
        from . import MissingData

        raise MissingData("babel (CLDR date formats)", install="pip install babel") from e
    return dates


def format_date(date: _dt.date, locale: str, fmt: str) -> str:
    """``date`` written in ``locale`` with one of :data:`FORMATS` (always with a 4-digit year)."""
    dates = _babel()
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {list(FORMATS)}, got {fmt!r}")
    if fmt in ("full", "long"):
        return dates.format_date(date, fmt, locale=locale)
    base = "medium" if fmt == "weekday_medium" else fmt
    pattern = dates.get_date_format(base, locale=locale).pattern
    if "yyyy" not in pattern:
        pattern = pattern.replace("yy", "y")  # CLDR "y" is the full year
    if fmt == "weekday_medium":
        pattern = "EEE " + pattern
    return dates.format_date(date, pattern, locale=locale)


def _usable(locale: str, fmt: str) -> bool:
    """en_US writes month-first numbers; keep its forms only when the month is a name."""
    if locale != "en_US":
        return True
    return fmt in ("full", "long", "medium", "weekday_medium")


def make_dates(
    n: int,
    *,
    seed: int = 0,
    locales: tuple[str, ...] = LOCALES,
    formats: tuple[str, ...] = FORMATS,
    length_range: tuple[int, int] = (8, 60),
    years: tuple[int, int] = (1900, 2099),
    filler: str = "words",
) -> list[tuple[str, str]]:
    """``n`` (source, ISO target) pairs. Each source gets a target length drawn uniformly from
    ``length_range`` and filler words (split between before and after the date) until it reaches
    it; a date already longer than the draw stays as it is, so the shortest bucket holds the
    compact numeric forms. ``filler="words"`` draws from :data:`FILLERS`; ``"random"`` makes
    random consonant strings (no vowel, so never a month or weekday name, and no digit), which an
    encoder cannot learn to skip as a small fixed set. Deterministic for a given ``seed``."""
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise ValueError(f"n must be a positive int (number of pairs), got {n!r}")
    lo, hi = length_range
    if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi):
        raise ValueError(f"length_range must be (lo, hi) ints with 1 <= lo <= hi, got {length_range!r}")
    bad = [loc for loc in locales if loc not in LOCALES]
    if bad:
        raise ValueError(f"locales must be among {list(LOCALES)}, got unknown {bad}")
    badf = [f for f in formats if f not in FORMATS]
    if badf:
        raise ValueError(f"formats must be among {list(FORMATS)}, got unknown {badf}")
    if filler not in ("words", "random"):
        raise ValueError(f"filler must be 'words' or 'random', got {filler!r}")
    combos = [(loc, f) for loc in locales for f in formats if _usable(loc, f)]
    if not combos:
        raise ValueError(f"no usable (locale, format) pair in locales={locales}, formats={formats}; add a locale other than en_US or a named-month format")
    rng = random.Random(seed)
    first, last = _dt.date(years[0], 1, 1).toordinal(), _dt.date(years[1], 12, 31).toordinal()
    out = []
    for _ in range(n):
        date = _dt.date.fromordinal(rng.randint(first, last))
        loc, f = combos[rng.randrange(len(combos))]
        core = format_date(date, loc, f)
        out.append((pad_with_fillers(core, rng.randint(lo, hi), rng, random_words=filler == "random"), date.isoformat()))
    return out


def make_date_lists(n: int, *, seed: int = 0, max_dates: int = 4, locales: tuple[str, ...] = LOCALES,
                    formats: tuple[str, ...] = FORMATS) -> list[tuple[str, str]]:
    """``n`` pairs whose source lists 1..``max_dates`` dates (each in its own locale and format,
    joined by " ; ") and whose target lists their ISO forms (joined by " "). Unlike
    :func:`make_dates`, the information to carry grows with the source: a longer source holds more
    dates to reproduce, as a longer sentence holds more to translate — the setting in which one
    fixed-size encoder state becomes a bottleneck. Deterministic for a given ``seed``."""
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise ValueError(f"n must be a positive int (number of pairs), got {n!r}")
    if isinstance(max_dates, bool) or not isinstance(max_dates, int) or max_dates < 1:
        raise ValueError(f"max_dates must be a positive int, got {max_dates!r}")
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(1, max_dates)
        parts = make_dates(k, seed=rng.randrange(2**31), locales=locales, formats=formats, length_range=(1, 1))
        out.append((" ; ".join(s for s, _ in parts), " ".join(t for _, t in parts)))
    return out


def pad_with_fillers(core: str, target_len: int, rng: random.Random, *, random_words: bool = False) -> str:
    """Add filler words around ``core`` while the result stays within ``target_len`` characters."""
    before: list[str] = []
    after: list[str] = []
    length = len(core)
    for _ in range(64):  # bounded: each word adds ≥ 3 characters
        w = "".join(rng.choice(_CONSONANTS) for _ in range(rng.randint(2, 6))) if random_words else FILLERS[rng.randrange(len(FILLERS))]
        if length + len(w) + 1 > target_len:
            break
        (before if rng.random() < 0.5 else after).append(w)
        length += len(w) + 1
    return " ".join(before + [core] + after)


def length_buckets(edges: tuple[int, ...] = (0, 15, 25, 35, 45, 1000)) -> list[tuple[int, int]]:
    """Inclusive (lo, hi) source-length ranges from bucket edges: (0, 15), (16, 25), ..."""
    return [(edges[0] if i == 0 else edges[i] + 1, edges[i + 1]) for i in range(len(edges) - 1)]
