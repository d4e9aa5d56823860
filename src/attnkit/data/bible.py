"""English → Spanish verse pairs from two public-domain Bibles: King James (1769) and Reina-Valera 1909.

Real parallel text that ships offline: the Debian packages ``sword-text-kjv`` (module
``engKJV2006eb``) and ``sword-text-sparv`` (module ``spaRV1909eb``) install CrossWire SWORD
modules under ``/usr/share/sword``, and the pip package ``pysword`` reads them. Both modules use
the KJV versification, so the verse (book, chapter, verse) is a shared key and the two texts
align verse by verse (~31k pairs) with no sentence aligner.

Cleaning: pysword's ``clean=True`` drops the OSIS markup (Strong's numbers in ``<w lemma=...>``,
``<transChange>``, milestones, titles); we then collapse whitespace, strip any leftover tag, and
lower-case the typographic all-capitals of a chapter's first word ("EN el principio" → "En el
principio"). Known residue: a few Spanish psalm titles are plain text where KJV tags them, so
those verses carry an extra phrase on the Spanish side.

Splits never leak a verse: :func:`split_pairs` assigns whole books (``by="book"``) or single
verses by a hash of their reference (``by="hash"``) to train/valid/test.

Reading the whole of both modules takes tens of seconds (zlib blocks, regex cleaning), so
:func:`load_bible_pairs` caches the pairs as a TSV when given ``cache_dir``.

Shape legend: a pair is a :class:`VersePair` (book, chapter, verse, en, es).
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import NamedTuple

from . import MissingData

SWORD_PATH = "/usr/share/sword"
MODULES = {"en": ("engKJV2006eb", "sword-text-kjv"), "es": ("spaRV1909eb", "sword-text-sparv")}
_TAG = re.compile(r"<[^>]*>")
_SPACE = re.compile(r"\s+")
_CAPS_START = re.compile(r"^([¡¿(\"']*)([A-ZÁÉÍÓÚÑÜ]{2,})\b")


class VersePair(NamedTuple):
    book: str
    chapter: int
    verse: int
    en: str
    es: str

    @property
    def ref(self) -> str:
        return f"{self.book}.{self.chapter}.{self.verse}"


def clean_verse(text: str) -> str:
    """Strip leftover markup, collapse whitespace, and un-capitalise a small-caps first word."""
    text = _SPACE.sub(" ", _TAG.sub(" ", text)).strip()
    return _CAPS_START.sub(lambda m: m.group(1) + m.group(2).capitalize(), text)


def _open_modules(sword_path: str | os.PathLike):
    try:
        from pysword.modules import SwordModules
    except ImportError as e:
        raise MissingData("the Bible verse pairs", install="pip install pysword") from e
    path = Path(sword_path)
    conf = path / "mods.d"
    for lang, (module, package) in MODULES.items():
        if not (conf / f"{module}.conf").is_file():
            raise MissingData(f"the {lang} Bible (SWORD module {module} under {path})", install=f"apt-get install {package}")
    mods = SwordModules(str(path))
    found = mods.parse_modules()
    for lang, (module, package) in MODULES.items():
        if module not in found:  # pragma: no cover - the .conf exists but pysword did not list it
            raise MissingData(f"the {lang} Bible (SWORD module {module})", install=f"apt-get install --reinstall {package}")
    return mods


def load_bible_pairs(
    *, books: tuple[str, ...] | None = None, sword_path: str | os.PathLike = SWORD_PATH, cache_dir: str | os.PathLike | None = None
) -> list[VersePair]:
    """Aligned (en, es) verse pairs, in canonical order; verses empty on either side are dropped.

    ``books``: OSIS names or English names (``("Gen", "Jude")``) to read only those; None = all 66.
    ``cache_dir``: read/write ``bible_pairs.tsv`` there (only for the whole Bible).
    """
    cache = Path(cache_dir) / "bible_pairs.tsv" if cache_dir is not None and books is None else None
    if cache is not None and cache.is_file():
        return _read_cache(cache)
    mods = _open_modules(sword_path)
    en_bible = mods.get_bible_from_module(MODULES["en"][0])
    es_bible = mods.get_bible_from_module(MODULES["es"][0])
    structure = en_bible.get_structure().get_books()
    all_books = structure["ot"] + structure["nt"]
    if books is not None:
        wanted = {b.lower() for b in books}
        chosen = [b for b in all_books if b.osis_name.lower() in wanted or b.name.lower() in wanted]
        unknown = wanted - {b.osis_name.lower() for b in chosen} - {b.name.lower() for b in chosen}
        if unknown:
            raise ValueError(f"books must be OSIS or English book names (e.g. 'Gen', 'Jude'), got unknown {sorted(unknown)}")
    else:
        chosen = all_books
    pairs = []
    for book in chosen:
        en = en_bible.get_iter(books=[book.osis_name], clean=True)
        es = es_bible.get_iter(books=[book.osis_name], clean=True)
        refs = ((c + 1, v + 1) for c, n in enumerate(book.chapter_lengths) for v in range(n))
        for (ch, vs), e, s in zip(refs, en, es):
            e, s = clean_verse(e), clean_verse(s)
            if e and s:
                pairs.append(VersePair(book.osis_name, ch, vs, e, s))
    if cache is not None:
        _write_cache(cache, pairs)
    return pairs


def split_pairs(
    pairs: list[VersePair], *, by: str = "book", valid_fraction: float = 0.05, test_fraction: float = 0.1, seed: int = 0
) -> dict[str, list[VersePair]]:
    """train/valid/test with no verse in two splits.

    ``by="book"``: whole books, dealt round-robin in canonical order into test, valid and train
    shares (so both testaments and every genre appear in each); ``by="hash"``: each verse by a
    hash of ``seed`` and its reference (stable across runs and machines, unlike ``hash()``).
    """
    if by not in ("book", "hash"):
        raise ValueError(f"by must be 'book' or 'hash', got {by!r}")
    if not (0 <= valid_fraction < 1 and 0 < test_fraction < 1 and valid_fraction + test_fraction < 1):
        raise ValueError(f"valid_fraction and test_fraction must be in [0, 1) with a sum < 1, got {valid_fraction}, {test_fraction}")
    out: dict[str, list[VersePair]] = {"train": [], "valid": [], "test": []}
    if by == "hash":
        for p in pairs:
            u = int(hashlib.sha1(f"{seed}:{p.ref}".encode()).hexdigest()[:8], 16) / 16**8
            out["test" if u < test_fraction else "valid" if u < test_fraction + valid_fraction else "train"].append(p)
        return out
    books = list(dict.fromkeys(p.book for p in pairs))
    period = max(1, round(1 / test_fraction))
    test_books = set(books[seed % period :: period])
    rest = [b for b in books if b not in test_books]
    vperiod = max(1, round(1 / valid_fraction)) if valid_fraction > 0 else 0
    valid_books = set(rest[(seed + 1) % vperiod :: vperiod]) if vperiod else set()
    for p in pairs:
        out["test" if p.book in test_books else "valid" if p.book in valid_books else "train"].append(p)
    return out


def _write_cache(path: Path, pairs: list[VersePair]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for p in pairs:
            f.write(f"{p.book}\t{p.chapter}\t{p.verse}\t{p.en}\t{p.es}\n")
    os.replace(tmp, path)  # atomic: a half-written cache is never read


def _read_cache(path: Path) -> list[VersePair]:
    pairs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            b, c, v, en, es = line.rstrip("\n").split("\t")
            pairs.append(VersePair(b, int(c), int(v), en, es))
    return pairs
