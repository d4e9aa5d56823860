"""The data side of ``attnkit experiment seq2seq``: one :class:`Seq2SeqData` per ``--data`` choice.

* ``dates`` — :func:`attnkit.data.dates.make_dates` (train, valid and test drawn with different
  seeds; a test date string that also occurs in training is dropped), one character tokenizer per
  side, buckets by source length in characters, metrics exact match and character accuracy;
* ``dates-list`` — :func:`attnkit.data.dates.make_date_lists`: 1..``max_dates`` dates per source
  → their ISO forms, so what the encoder must carry grows with the source (the bottleneck's setting);
  handled like ``dates``;
* ``bible`` — :func:`attnkit.data.bible.load_bible_pairs` split by book (no verse and no book in
  two splits), a BPE tokenizer per side trained on the training split only, buckets by source
  length in words, metrics BLEU and chrF (sacrebleu);
* a path to a ``.tsv`` file — :func:`attnkit.data.parallel_tsv.load_tsv_pairs`, split by a hash of
  the source; each side's tokenization is chosen from its training split
  (:func:`attnkit.data.tokenizer_choice.choose_tokenizer`: whitespace tokens, characters or a BPE
  sized to the data; ``tokenizer=char|word|subword`` forces one, for ``bible`` too). When the target
  side is read as characters or whitespace tokens the task is a symbol transduction (``kind``
  ``"symbols"``): scored by exact match and chrF instead of BLEU and chrF.

Anything else is one clear error before any work. Sentences longer than ``max_len`` tokens are
dropped from training (memory and time grow with length) but every test sentence is kept, in the
last bucket if it is long: the test set is not filtered by the models' convenience. ``train_max_words``
(text only) keeps training and validation pairs of at most that many source words, as Bahdanau et
al. (2015) trained their "-30" models on sentences of up to 30 words and tested them on every length.

Shape legend: pairs are (source, target) strings; encoded pairs (source ids, target ids).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ...data.tokenize import CharTokenizer, SubwordTokenizer, encode_pairs
from ...data.tokenizer_choice import choose_pair_tokenizers

DATA_CHOICES = ("dates", "dates-list", "bible", "PATH.tsv")
DATE_EDGES = (0, 15, 25, 35, 45, 60)
TEXT_EDGES = (0, 10, 20, 30, 40, 50, 1000)
MAX_LEN_CAP = 400  # tokens: with size_to_data, max_len grows to the longest training pair up to this


@dataclass
class Seq2SeqData:
    name: str
    kind: str  # "dates" (exact match, char accuracy), "symbols" (exact match, chrF) or "text" (BLEU, chrF)
    train: list  # [(source ids, target ids)]
    valid: list
    test_pairs: list[tuple[str, str]]  # raw strings, for metrics and labels
    test: list
    src_tok: object
    tgt_tok: object
    edges: tuple[int, ...]  # bucket edges: bucket i holds lo < length <= hi (the first from 0)
    length_unit: str  # "characters" or "words"
    info: dict = field(default_factory=dict)

    @property
    def metric_names(self) -> tuple[str, str]:
        return {"dates": ("exact_match", "char_accuracy"), "symbols": ("exact_match", "chrf")}.get(self.kind, ("bleu", "chrf"))

    def source_length(self, source: str) -> int:
        return len(source) if self.length_unit == "characters" else len(source.split())

    def buckets(self) -> list[tuple[int, int]]:
        """Inclusive (lo, hi) ranges; the last one also takes any longer source."""
        e = self.edges
        return [(e[0] if i == 0 else e[i] + 1, e[i + 1]) for i in range(len(e) - 1)]

    def bucket_of(self, source: str) -> int:
        n = self.source_length(source)
        for i, (_, hi) in enumerate(self.buckets()):
            if n <= hi:
                return i
        return len(self.edges) - 2


def check_data_choice(data: str) -> str:
    """``dates``, ``bible`` or an existing-looking ``*.tsv`` path; else one error listing the choices."""
    if not isinstance(data, str) or not data:
        raise ValueError(f"--data must be one of {list(DATA_CHOICES)}, got {data!r}")
    if data in ("dates", "dates-list", "bible") or data.lower().endswith(".tsv"):
        return data
    raise ValueError(f"--data must be 'dates', 'dates-list', 'bible' or a path to a .tsv file of 'source<TAB>target' lines, got {data!r}")


def load_data(cfg: dict, cache_dir: Path) -> Seq2SeqData:
    data = check_data_choice(cfg["data"])
    if data == "dates":
        return _dates(cfg)
    if data == "dates-list":
        return _date_lists(cfg)
    if data == "bible":
        from ...data.bible import load_bible_pairs, split_pairs

        pairs = load_bible_pairs(cache_dir=cache_dir)
        split = split_pairs(pairs, by=cfg.get("split", "book"), seed=0)
        as_str = {k: [(p.en, p.es) for p in v] for k, v in split.items()}
        info = {"source": "KJV (sword-text-kjv) → Reina-Valera 1909 (sword-text-sparv)", "pairs": len(pairs), "split": cfg.get("split", "book")}
        return _text("bible", as_str, cfg, info)
    from ...data.parallel_tsv import load_tsv_pairs, split_tsv_pairs

    pairs = load_tsv_pairs(data)
    return _text(Path(data).name, split_tsv_pairs(pairs), cfg, {"source": str(data), "pairs": len(pairs), "split": "hash"})


def _subsample(pairs: list, n: int | None) -> list:
    if not n or len(pairs) <= n:
        return pairs
    step = len(pairs) / n
    return [pairs[int(i * step)] for i in range(n)]  # evenly spread: every book keeps its share


def _dates(cfg: dict) -> Seq2SeqData:
    from ...data.dates import make_dates

    rng = tuple(cfg["length_range"])
    filler = cfg.get("filler", "words")
    train = make_dates(cfg["n_train"], seed=1, length_range=rng, filler=filler)
    valid = make_dates(cfg["n_valid"], seed=2, length_range=rng, filler=filler)
    seen = {s for s, _ in train}
    test = [p for p in make_dates(cfg["n_test"], seed=3, length_range=rng, filler=filler) if p[0] not in seen]
    src_tok = CharTokenizer(s for s, _ in train)
    tgt_tok = CharTokenizer(t for _, t in train)
    info = {"source": "babel CLDR dates", "length_range": list(rng), "filler": filler, "train": len(train), "valid": len(valid), "test": len(test)}
    return Seq2SeqData(
        "dates", "dates", encode_pairs(train, src_tok, tgt_tok), encode_pairs(valid, src_tok, tgt_tok), test,
        encode_pairs(test, src_tok, tgt_tok), src_tok, tgt_tok, tuple(cfg.get("edges") or _date_edges(rng[1])), "characters", info,
    )


LIST_EDGES = (0, 25, 45, 65, 85, 1000)  # characters: from one date alone to four long ones


def _date_lists(cfg: dict) -> Seq2SeqData:
    """Lists of 1..``max_dates`` dates → their ISO forms: the source's information grows with its length."""
    from ...data.dates import make_date_lists

    k = int(cfg.get("max_dates", 4))
    train = make_date_lists(cfg["n_train"], seed=1, max_dates=k)
    valid = make_date_lists(cfg["n_valid"], seed=2, max_dates=k)
    seen = {s for s, _ in train}
    test = [p for p in make_date_lists(cfg["n_test"], seed=3, max_dates=k) if p[0] not in seen]
    src_tok = CharTokenizer(s for s, _ in train)
    tgt_tok = CharTokenizer(t for _, t in train)
    info = {"source": "babel CLDR date lists", "max_dates": k, "train": len(train), "valid": len(valid), "test": len(test)}
    return Seq2SeqData(
        "dates-list", "dates", encode_pairs(train, src_tok, tgt_tok), encode_pairs(valid, src_tok, tgt_tok), test,
        encode_pairs(test, src_tok, tgt_tok), src_tok, tgt_tok, tuple(cfg.get("edges") or LIST_EDGES), "characters", info,
    )


def _date_edges(longest: int) -> tuple[int, ...]:
    """(0, 15, 25, 35, 45, 60) up to 60 characters; beyond, five equal steps after 15."""
    if longest <= 60:
        return DATE_EDGES
    step = (longest - 15) / 5
    return (0, 15) + tuple(round(15 + step * i) for i in range(1, 6))


def _text(name: str, split: dict, cfg: dict, info: dict) -> Seq2SeqData:
    cap = cfg.get("train_max_words")
    if cap:  # Bahdanau et al.'s "-30" models: trained (and early-stopped) on short sentences, tested on all
        split = {**split, **{k: [p for p in split[k] if len(p[0].split()) <= cap] for k in ("train", "valid")}}
        info = {**info, "train_max_words": cap}
    train = _subsample(split["train"], cfg.get("max_train"))
    valid = _subsample(split["valid"], cfg.get("max_valid"))
    test = _subsample(split["test"], cfg.get("max_test"))
    if not train or not test:
        raise ValueError(f"{name}: the split left {len(train)} training and {len(test)} test pairs; give more lines")
    choice = cfg.get("tokenizer", "auto")
    if name == "bible" and choice == "auto":  # the committed Bible runs: a BPE of vocab_size per side
        src_tok = SubwordTokenizer((s for s, _ in train), cfg["vocab_size"])
        tgt_tok = SubwordTokenizer((t for _, t in train), cfg["vocab_size"])
        kind = "text"
    else:
        src_c, tgt_c, src_tok, tgt_tok = choose_pair_tokenizers(train, override=choice, max_vocab=cfg["vocab_size"])
        info = {**info, "tokenization": {"source": src_c.describe(src_tok), "target": tgt_c.describe(tgt_tok)}}
        kind = "symbols" if tgt_c.kind in ("char", "word") else "text"
    enc_all = encode_pairs(train, src_tok, tgt_tok)
    max_len = cfg["max_len"]
    if cfg.get("size_to_data") and name != "bible":  # a user TSV keeps every training pair: the longest sets max_len (up to a cap)
        max_len = max(max_len, min(MAX_LEN_CAP, max(max(len(a), len(b) + 1) for a, b in enc_all)))
    enc_train = [p for p in enc_all if len(p[0]) <= max_len and len(p[1]) < max_len]
    enc_valid = [p for p in encode_pairs(valid, src_tok, tgt_tok) if len(p[0]) <= max_len and len(p[1]) < max_len] or enc_train[:64]
    info = {**info, "train": len(enc_train), "valid": len(enc_valid), "test": len(test), "vocab": [src_tok.vocab_size, tgt_tok.vocab_size],
            "max_len": max_len}
    longest = max(len(s.split()) for s, _ in test)
    return Seq2SeqData(
        name, kind, enc_train, enc_valid, test, encode_pairs(test, src_tok, tgt_tok), src_tok, tgt_tok,
        tuple(cfg.get("edges") or _text_edges(longest)), "words", info,
    )


def _text_edges(longest: int) -> tuple[int, ...]:
    """:data:`TEXT_EDGES` up to the first edge that holds the longest test source (no empty buckets at the end)."""
    cut = next((i for i, e in enumerate(TEXT_EDGES) if e >= longest), len(TEXT_EDGES) - 1)
    return TEXT_EDGES[: max(cut, 1) + 1]
