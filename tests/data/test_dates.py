"""Babel-generated date pairs: every target is the ISO form of the date the source spells (checked
by re-formatting that date in CLDR), ≥ 10 locales and every format appear, source lengths follow
the requested range (long sources exist), generation is deterministic, numeric forms keep a
4-digit year and en_US's month-first numerals are excluded; the char tokenizer round-trips."""

from __future__ import annotations

import datetime as dt

import pytest

from attnkit.data.dates import FILLERS, FORMATS, LOCALES, format_date, length_buckets, make_dates
from attnkit.data.tokenize import EOS, PAD, CharTokenizer, collate_pairs, encode_pairs


def test_cldr_forms_of_one_date():
    d = dt.date(2024, 3, 7)
    assert format_date(d, "fr_FR", "full") == "jeudi 7 mars 2024"  # the issue's own example
    assert format_date(d, "de_DE", "long") == "7. März 2024"
    assert format_date(d, "de_DE", "short") == "07.03.2024"  # CLDR "yy" widened to the full year
    assert format_date(d, "it_IT", "short").endswith("2024")
    assert format_date(d, "es_ES", "weekday_medium").startswith("jue")


def _strip_fillers(src: str) -> str:
    words = src.split(" ")
    while words and words[0] in FILLERS:
        words.pop(0)
    while words and words[-1] in FILLERS:
        words.pop()
    return " ".join(words)


def test_every_target_is_the_date_its_source_spells():
    pairs = make_dates(300, seed=3)
    combos = [(loc, f) for loc in LOCALES for f in FORMATS]
    for src, tgt in pairs:
        d = dt.date.fromisoformat(tgt)  # the target is ISO 8601
        core = _strip_fillers(src)
        assert any(format_date(d, loc, f) == core for loc, f in combos), (src, tgt)


def test_many_locales_and_all_formats_appear():
    pairs = make_dates(600, seed=0)
    cores = {_strip_fillers(s) for s, _ in pairs}
    seen_locales = set()
    seen_formats = set()
    for src, tgt in pairs:
        d = dt.date.fromisoformat(tgt)
        for loc in LOCALES:
            for f in FORMATS:
                if format_date(d, loc, f) == _strip_fillers(src):
                    seen_locales.add(loc[:2] if loc.startswith("en") else loc)
                    seen_formats.add(f)
    assert len(LOCALES) >= 10 and len(seen_locales) >= 10
    assert seen_formats == set(FORMATS)
    assert len(cores) > 500


def test_source_length_follows_the_requested_range():
    pairs = make_dates(400, seed=1, length_range=(8, 60))
    lengths = [len(s) for s, _ in pairs]
    assert max(lengths) <= 60 and max(lengths) >= 50
    assert sum(n >= 40 for n in lengths) >= 100  # long inputs exist in bulk
    assert sum(n <= 15 for n in lengths) >= 20
    short = make_dates(200, seed=1, length_range=(5, 5))
    assert all(_strip_fillers(s) == s for s, _ in short)  # no room for fillers: bare dates


def test_deterministic_per_seed():
    assert make_dates(50, seed=7) == make_dates(50, seed=7)
    assert make_dates(50, seed=7) != make_dates(50, seed=8)


def test_random_fillers_hold_no_vowel_and_no_digit():
    words = []
    for s, t in make_dates(200, seed=4, filler="random"):
        d = dt.date.fromisoformat(t)
        core = max((c for c in (format_date(d, loc, f) for loc in LOCALES for f in FORMATS) if c in s), key=len)
        before, after = s.split(core, 1)
        words += before.split() + after.split()
    assert len(words) > 200 and all(not (set(w) & set("aeiouy0123456789")) for w in words)


def test_en_us_numeric_forms_are_excluded():
    pairs = make_dates(200, seed=0, locales=("en_US",))
    assert not any("/" in s for s, _ in pairs)  # M/d/y would read as another locale's d/M/y


def test_length_buckets():
    assert length_buckets((0, 15, 25, 1000)) == [(0, 15), (16, 25), (26, 1000)]


def test_char_tokenizer_round_trip_and_batches():
    pairs = make_dates(100, seed=0)
    tok = CharTokenizer([s for s, _ in pairs] + [t for _, t in pairs])
    for s, _ in pairs[:20]:
        assert tok.decode(tok.encode(s)) == s
    assert tok.decode(tok.encode("2024") + [EOS] + tok.encode("99")) == "2024"
    assert tok.encode("\u2603")[0] == 3  # unseen character → UNK
    batch = collate_pairs(encode_pairs(pairs[:4], tok, tok))
    B, T = batch["tgt_in"].shape
    assert batch["tgt_out"][:, -1].tolist() == [EOS] * B  # every ISO target has the same length
    assert batch["src"].shape == (4, int(batch["src_len"].max())) and int((batch["src"] == PAD).sum()) == int((batch["src_len"].max() - batch["src_len"]).sum())


def test_bad_arguments_get_clear_errors():
    with pytest.raises(ValueError, match="n must be a positive int"):
        make_dates(0)
    with pytest.raises(ValueError, match="locales must be among"):
        make_dates(5, locales=("xx_YY",))
    with pytest.raises(ValueError, match="formats must be among"):
        make_dates(5, formats=("iso",))
    with pytest.raises(ValueError, match="length_range"):
        make_dates(5, length_range=(30, 10))
    with pytest.raises(ValueError, match="filler must be 'words' or 'random'"):
        make_dates(5, filler="lorem")
    with pytest.raises(ValueError, match="no usable"):
        make_dates(5, locales=("en_US",), formats=("short",))
    with pytest.raises(ValueError, match="CharTokenizer needs"):
        CharTokenizer([])


def test_date_lists_carry_one_iso_date_per_listed_date_and_grow_with_the_source():
    import datetime as dt

    from attnkit.data.dates import make_date_lists

    pairs = make_date_lists(300, seed=5, max_dates=4)
    assert pairs == make_date_lists(300, seed=5, max_dates=4)  # deterministic
    by_k: dict[int, list[int]] = {}
    for source, target in pairs:
        isos = target.split(" ")
        assert len(source.split(" ; ")) == len(isos) and 1 <= len(isos) <= 4
        assert all(dt.date.fromisoformat(d).isoformat() == d for d in isos)
        by_k.setdefault(len(isos), []).append(len(source))
    means = [sum(v) / len(v) for _, v in sorted(by_k.items())]
    assert sorted(by_k) == [1, 2, 3, 4] and means == sorted(means)  # more dates, longer sources


@pytest.mark.parametrize("kw", [{"n": 0}, {"n": 5, "max_dates": 0}])
def test_date_lists_reject_bad_sizes(kw):
    from attnkit.data.dates import make_date_lists

    with pytest.raises(ValueError, match="must be a positive int"):
        make_date_lists(**kw)
