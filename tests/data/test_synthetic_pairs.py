"""Synthetic seq2seq tasks: each target is the stated function of its source (checked against an
independent re-derivation), lengths cover [min_len, max_len], a seed reproduces the file byte for
byte and another seed changes it, the TSV reads back through load_tsv_pairs, and bad arguments are
ValueErrors naming the argument."""

from __future__ import annotations

import pytest

from attnkit.data.parallel_tsv import load_tsv_pairs
from attnkit.data.synthetic_pairs import TARGET_ALPHABET, main, make_pairs, make_task_tsv, syllables, translit_table


def test_copy_and_reverse_targets():
    for s, t in make_pairs("copy", 200, seed=3):
        assert s == t
    for s, t in make_pairs("reverse", 200, seed=3):
        assert t.split() == s.split()[::-1]


def test_translit_is_a_monotone_table_of_one_or_two_symbols():
    table = translit_table(24, seed=5)
    assert set(table) == set(syllables(24))
    assert all(1 <= len(v) <= 2 and set(v) <= set(TARGET_ALPHABET) for v in table.values())
    for s, t in make_pairs("translit", 200, seed=5):
        assert t == "".join(table[w] for w in s.split())
        assert " " not in t and len(s.split()) <= len(t) <= 2 * len(s.split())


def test_lengths_cover_the_range_and_vocab_is_respected():
    pairs = make_pairs("copy", 2000, seed=0, min_len=3, max_len=40, vocab=10)
    lengths = [len(s.split()) for s, _ in pairs]
    assert min(lengths) == 3 and max(lengths) == 40
    assert {w for s, _ in pairs for w in s.split()} == set(syllables(10))


def test_deterministic_by_seed_and_round_trips_through_tsv(tmp_path):
    a = make_task_tsv("translit", tmp_path / "a.tsv", 300, seed=1).read_bytes()
    b = make_task_tsv("translit", tmp_path / "b.tsv", 300, seed=1).read_bytes()
    c = make_task_tsv("translit", tmp_path / "c.tsv", 300, seed=2).read_bytes()
    assert a == b and a != c
    assert load_tsv_pairs(tmp_path / "a.tsv") == make_pairs("translit", 300, seed=1)


def test_cli_writes_the_file(tmp_path, capsys):
    assert main(["reverse", str(tmp_path / "r.tsv"), "--pairs", "50", "--max-len", "5"]) == 0
    assert len(load_tsv_pairs(tmp_path / "r.tsv")) == 50 and "50 reverse pairs" in capsys.readouterr().out


@pytest.mark.parametrize("kwargs, word", [
    ({"task": "sort"}, "task"), ({"n": 0}, "the number of pairs"), ({"min_len": 0}, "min_len"),
    ({"min_len": 9, "max_len": 3}, "min_len must be <= max_len"), ({"vocab": 1}, "vocab"), ({"vocab": 1000}, "vocab"),
])
def test_bad_arguments(kwargs, word):
    args = {"task": "copy", "n": 10, **kwargs}
    with pytest.raises(ValueError, match=word):
        make_pairs(args.pop("task"), args.pop("n"), **args)
