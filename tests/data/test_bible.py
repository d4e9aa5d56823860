"""The KJV / Reina-Valera 1909 verse pairs on a small slice (Jude, Ruth 1): verses align by reference,
markup is gone, small-caps first words are un-capitalised, book and hash splits never share a
verse, the TSV cache round-trips, and a missing Debian package or pysword is one MissingData
error naming what to install."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pysword")

from attnkit.data import MissingData  # noqa: E402
from attnkit.data.bible import SWORD_PATH, VersePair, clean_verse, load_bible_pairs, split_pairs  # noqa: E402

needs_sword = pytest.mark.skipif(
    not (Path(SWORD_PATH) / "mods.d" / "engKJV2006eb.conf").is_file() or not (Path(SWORD_PATH) / "mods.d" / "spaRV1909eb.conf").is_file(),
    reason="needs the Debian packages sword-text-kjv and sword-text-sparv",
)


@pytest.fixture(scope="module")
def jude():
    return load_bible_pairs(books=("Jude",))


@needs_sword
def test_jude_aligns_verse_by_verse(jude):
    assert len(jude) == 25  # Jude has 25 verses in the KJV versification, every one in both Bibles
    assert [p.verse for p in jude] == list(range(1, 26))
    first = jude[0]
    assert first.book == "Jude" and first.chapter == 1
    assert first.en.startswith("Jude, the servant of Jesus Christ")
    assert first.es.startswith("Judas, siervo de Jesucristo")  # "JUDAS" small caps → "Judas"
    assert jude[1].en.startswith("Mercy unto you") and jude[1].es.startswith("Misericordia")


@needs_sword
def test_markup_is_stripped(jude):
    for p in jude:
        for text in (p.en, p.es):
            assert "<" not in text and ">" not in text and "strong:" not in text
            assert text == text.strip() and "  " not in text


@needs_sword
def test_books_by_english_name_and_unknown_book():
    ruth = load_bible_pairs(books=("ruth",))
    assert {p.book for p in ruth} == {"Ruth"} and len(ruth) == 85
    with pytest.raises(ValueError, match="unknown"):
        load_bible_pairs(books=("Hezekiah",))


def test_clean_verse():
    assert clean_verse(' <w lemma="x">EN</w>  el principio\n') == "En el principio"
    assert clean_verse("¡OH Jehová") == "¡Oh Jehová"
    assert clean_verse("And the LORD said") == "And the LORD said"  # only the first word


def _fake_pairs():
    return [VersePair(b, c, v, f"{b} {c}:{v}", f"{b} {c}:{v} es") for b in ("Gen", "Exod", "Ruth", "Matt", "Jude", "Rev") for c in (1, 2) for v in range(1, 11)]


@pytest.mark.parametrize("by", ["book", "hash"])
def test_splits_never_share_a_verse(by):
    pairs = _fake_pairs()
    s = split_pairs(pairs, by=by, valid_fraction=0.2, test_fraction=0.34)
    refs = {k: {p.ref for p in v} for k, v in s.items()}
    assert refs["train"] and refs["test"]
    assert not (refs["train"] & refs["test"]) and not (refs["train"] & refs["valid"]) and not (refs["valid"] & refs["test"])
    assert sum(len(v) for v in s.values()) == len(pairs)
    if by == "book":
        books = {k: {p.book for p in v} for k, v in s.items()}
        assert not (books["train"] & books["test"])  # whole books
    assert split_pairs(pairs, by=by, valid_fraction=0.2, test_fraction=0.34) == s  # deterministic


def test_split_bad_arguments():
    with pytest.raises(ValueError, match="by must be 'book' or 'hash'"):
        split_pairs(_fake_pairs(), by="chapter")
    with pytest.raises(ValueError, match="sum < 1"):
        split_pairs(_fake_pairs(), valid_fraction=0.5, test_fraction=0.6)


def test_cache_round_trip(tmp_path, monkeypatch):
    import attnkit.data.bible as bible

    pairs = _fake_pairs()
    bible._write_cache(tmp_path / "bible_pairs.tsv", pairs)
    monkeypatch.setattr(bible, "_open_modules", lambda path: pytest.fail("the cache must be read, not the modules"))
    assert load_bible_pairs(cache_dir=tmp_path) == pairs


def test_missing_debian_package_names_it(tmp_path):
    (tmp_path / "mods.d").mkdir()
    with pytest.raises(MissingData, match="apt-get install sword-text-kjv"):
        load_bible_pairs(sword_path=tmp_path)
    (tmp_path / "mods.d" / "engKJV2006eb.conf").write_text("[engKJV2006eb]\n")
    with pytest.raises(MissingData, match="apt-get install sword-text-sparv") as e:
        load_bible_pairs(sword_path=tmp_path)
    assert e.value.install == "apt-get install sword-text-sparv"


def test_missing_pysword_names_the_pip_package(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pysword.modules", None)  # import fails as if not installed
    with pytest.raises(MissingData, match="pip install pysword"):
        load_bible_pairs(books=("Jude",))
