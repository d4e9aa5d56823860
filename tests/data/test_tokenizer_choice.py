"""The per-side tokenization rule: a closed whitespace vocabulary gets word tokens, a short alphabet
without one gets characters, open-vocabulary text gets a BPE sized by its frequent words (within the
floor and the cap), the override forces a kind, every choice round-trips the training texts, its
record carries the numbers the rule used, and bad arguments are ValueErrors naming the fix.
WordTokenizer is checked against a hand-built vocabulary."""

from __future__ import annotations

import random

import pytest

from attnkit.data.synthetic_pairs import make_pairs
from attnkit.data.tokenize import EOS, SPECIALS, UNK, CharTokenizer, SubwordTokenizer, WordTokenizer
from attnkit.data import tokenizer_choice as tc


def _open_text(n: int = 600, seed: int = 0) -> list[str]:
    """Sentences over ~3,000 random 'words' of 3-9 letters: an open vocabulary, Zipf-like frequencies."""
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9))) for _ in range(3000)]
    weights = [1 / (i + 1) for i in range(len(words))]
    return [" ".join(rng.choices(words, weights, k=rng.randint(20, 40))) for _ in range(n)]


def test_word_tokenizer_matches_a_hand_built_vocabulary():
    tok = WordTokenizer(["b a", "c a"])
    assert tok.itos == list(SPECIALS) + ["a", "b", "c"]
    assert tok.encode("a  c z") == [4, 6, UNK]
    assert tok.decode([5, 4, EOS, 6]) == "b a" and tok.vocab_size == 7
    with pytest.raises(ValueError, match="non-blank"):
        WordTokenizer(["  "])


def test_synthetic_translit_gets_words_on_the_source_and_characters_on_the_target():
    train = make_pairs("translit", 2000, seed=0)
    src, tgt, stok, ttok = tc.choose_pair_tokenizers(train)
    assert (src.kind, tgt.kind) == ("word", "char")
    assert isinstance(stok, WordTokenizer) and isinstance(ttok, CharTokenizer)
    assert src.stats["word_types"] == 24 and tgt.stats["alphabet"] == 10
    assert ttok.vocab_size == len(SPECIALS) + 10 and stok.vocab_size == len(SPECIALS) + 24
    for s, t in train[:50]:
        assert stok.decode(stok.encode(s)) == s and ttok.decode(ttok.encode(t)) == t
    rec = tgt.describe(ttok)
    assert rec["kind"] == "char" and rec["vocab_size"] == 14 and "10 distinct characters" in rec["reason"]


def test_open_vocabulary_gets_a_subword_vocabulary_sized_by_frequent_words():
    texts = _open_text()
    choice = tc.choose_tokenizer(texts, "source", max_vocab=5000)
    s = choice.stats
    assert choice.kind == "subword" and s["word_types"] > tc.WORD_TYPES_MAX
    assert choice.vocab_size == max(s["alphabet"] + len(SPECIALS) + tc.SUBWORD_MIN_EXTRA, s["frequent_word_types"])
    assert tc.choose_tokenizer(texts, "source", max_vocab=300).vocab_size == 300  # the cap wins
    tok = choice.build(texts)
    assert isinstance(tok, SubwordTokenizer) and tok.vocab_size <= choice.vocab_size
    assert tok.decode(tok.encode(texts[0])) == texts[0]


def test_long_texts_of_a_small_alphabet_are_not_read_as_characters():
    long = [t + " " + t + " " + t for t in _open_text(300)]  # > 200 characters each
    assert tc.choose_tokenizer(long, "target").kind == "subword"


def test_override_forces_the_kind_and_keeps_the_statistics():
    train = make_pairs("copy", 500, seed=0)
    for kind in ("char", "word", "subword"):
        src, tgt, stok, ttok = tc.choose_pair_tokenizers(train, override=kind, max_vocab=200)
        assert src.kind == tgt.kind == kind and "forced" in src.reason and src.stats["word_types"] == 24
        s, t = train[0]
        assert stok.decode(stok.encode(s)).replace(" ", "") == s.replace(" ", "")


@pytest.mark.parametrize("kwargs, word", [({"override": "bpe"}, "tokenizer must be one of"), ({"max_vocab": 3}, "max_vocab")])
def test_bad_arguments(kwargs, word):
    with pytest.raises(ValueError, match=word):
        tc.choose_tokenizer(["a b"], "source", **kwargs)
    with pytest.raises(ValueError, match="no non-blank"):
        tc.choose_tokenizer(["", " "], "target")
