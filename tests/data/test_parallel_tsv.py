"""User TSV corpora: good files load (blank lines skipped, CRLF tolerated), every malformed file
(empty, a line without a tab, two tabs, an empty side, a missing path) gets one clear error naming
the line and the fix, hash splits are disjoint and stable; the subword tokenizer trained on the
training split round-trips text and keeps the shared special ids."""

from __future__ import annotations

import pytest

from attnkit.data.parallel_tsv import load_tsv_pairs, split_tsv_pairs
from attnkit.data.tokenize import BOS, EOS, PAD, UNK, SubwordTokenizer


def _write(tmp_path, text, name="corpus.tsv"):
    p = tmp_path / name
    p.write_bytes(text.encode("utf-8"))
    return p


def test_loads_pairs_skipping_blank_lines(tmp_path):
    p = _write(tmp_path, "hello\thola\n\n good morning \tbuenos días\r\n")
    assert load_tsv_pairs(p) == [("hello", "hola"), ("good morning", "buenos días")]
    assert load_tsv_pairs(p, max_pairs=1) == [("hello", "hola")]


def test_empty_file_is_one_clear_error(tmp_path):
    with pytest.raises(ValueError, match="holds no 'source<TAB>target' pairs"):
        load_tsv_pairs(_write(tmp_path, ""))
    with pytest.raises(ValueError, match="holds no"):
        load_tsv_pairs(_write(tmp_path, "\n  \n", "blank.tsv"))


def test_line_without_tab_names_the_line(tmp_path):
    p = _write(tmp_path, "a\tb\nno tab here\nc\td\n")
    with pytest.raises(ValueError, match=r"corpus\.tsv:2: .*got no tab in 'no tab here'.*exactly one tab"):
        load_tsv_pairs(p)


def test_two_tabs_and_empty_sides_are_errors(tmp_path):
    with pytest.raises(ValueError, match=":1: .*got 2 tabs"):
        load_tsv_pairs(_write(tmp_path, "a\tb\tc\n"))
    with pytest.raises(ValueError, match=":2: the target side is empty"):
        load_tsv_pairs(_write(tmp_path, "a\tb\nx\t \n", "e.tsv"))
    with pytest.raises(ValueError, match=":1: the source side is empty"):
        load_tsv_pairs(_write(tmp_path, "\ty\n", "f.tsv"))


def test_missing_file_says_what_to_give(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file; give a TSV"):
        load_tsv_pairs(tmp_path / "nope.tsv")
    with pytest.raises(ValueError, match="is not a file"):
        load_tsv_pairs(tmp_path)


def test_hash_split_is_disjoint_and_stable():
    pairs = [(f"source {i}", f"target {i}") for i in range(300)] + [("source 7", "another target")]
    s = split_tsv_pairs(pairs, valid_fraction=0.1, test_fraction=0.2)
    assert sum(map(len, s.values())) == len(pairs)
    srcs = {k: {a for a, _ in v} for k, v in s.items()}
    assert not (srcs["train"] & srcs["test"]) and not (srcs["train"] & srcs["valid"]) and not (srcs["valid"] & srcs["test"])
    assert 30 < len(s["test"]) < 90
    assert split_tsv_pairs(pairs, valid_fraction=0.1, test_fraction=0.2) == s
    with pytest.raises(ValueError, match="sum < 1"):
        split_tsv_pairs(pairs, valid_fraction=0.5, test_fraction=0.5)


def test_subword_tokenizer_trained_on_training_split():
    train = ["the quick brown fox jumps over the lazy dog", "the dog sleeps", "a quick fox"] * 20
    tok = SubwordTokenizer(train, vocab_size=60, min_frequency=1)
    assert tok.vocab_size <= 60
    assert tok.tokens([PAD, BOS, EOS, UNK]) == ["<pad>", "<s>", "</s>", "<unk>"]  # the shared special ids
    for s in ("the quick brown fox", "the lazy dog sleeps"):
        ids = tok.encode(s)
        assert min(ids) > UNK and tok.decode(ids) == s
    assert tok.decode(tok.encode("the dog") + [EOS] + tok.encode("fox")) == "the dog"
    assert len(tok.encode("the quick brown fox")) < len("the quick brown fox")  # merges happened
    with pytest.raises(ValueError, match="vocab_size must be an int"):
        SubwordTokenizer(train, vocab_size=3)
    with pytest.raises(ValueError, match="non-empty training texts"):
        SubwordTokenizer([""], vocab_size=50)
