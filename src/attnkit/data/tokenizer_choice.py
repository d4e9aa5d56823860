"""Choose a tokenization per side of a parallel corpus from its training split, and say why.

A fixed 2,000-merge BPE on every side turns a 10-symbol target into hundreds of arbitrary
multi-symbol tokens that a small model cannot learn from a few thousand pairs; a character model of
long natural-language sentences is slow and drops most of them at ``max_len``. The rule, on the
training texts of one side (all numbers recorded in :meth:`TokenizerChoice.describe`):

1. **word** (one id per whitespace token) when the side is a closed vocabulary: at most
   :data:`WORD_TYPES_MAX` distinct tokens, each seen :data:`MIN_OCCURRENCES` times or more on
   average — every embedding then gets enough examples to be learned;
2. else **char** (one id per character) when the alphabet is small — at most
   :data:`CHAR_ALPHABET_MAX` distinct characters — and texts stay short in characters (95th
   percentile at most :data:`CHAR_LENGTH_MAX`), so a recurrent model can read them one by one;
3. else **subword** (byte-pair encoding) with a vocabulary sized to what the split supports: the
   number of whitespace tokens seen at least :data:`SUBWORD_MIN_COUNT` times (the units the data
   can teach), at least the alphabet + :data:`SUBWORD_MIN_EXTRA` and at most ``max_vocab``.

``override`` ("char", "word" or "subword"; "auto" applies the rule) forces a kind and the numbers
are still recorded. Shape legend: texts are strings; lengths are in characters or tokens.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from .tokenize import SPECIALS, CharTokenizer, SubwordTokenizer, WordTokenizer

KINDS = ("auto", "char", "word", "subword")
WORD_TYPES_MAX = 1000
MIN_OCCURRENCES = 20
CHAR_ALPHABET_MAX = 100
CHAR_LENGTH_MAX = 200
SUBWORD_MIN_COUNT = 5
SUBWORD_MIN_EXTRA = 100


@dataclass(frozen=True)
class TokenizerChoice:
    """One side's tokenization: ``kind`` ("char" | "word" | "subword"), the BPE size when subword,
    the sentence that explains the choice and the statistics it was made from."""

    side: str
    kind: str
    vocab_size: int | None
    reason: str
    stats: dict = field(default_factory=dict)

    def build(self, texts: Iterable[str]):
        """The tokenizer, trained on ``texts`` (the training split of this side)."""
        if self.kind == "char":
            return CharTokenizer(texts)
        if self.kind == "word":
            return WordTokenizer(texts)
        return SubwordTokenizer(texts, self.vocab_size)

    def describe(self, tokenizer=None) -> dict:
        """JSON-able record for results.json (``tokenizer`` adds the vocabulary it actually built)."""
        out = {"side": self.side, "kind": self.kind, "reason": self.reason, **self.stats}
        if self.vocab_size is not None:
            out["subword_vocab_target"] = self.vocab_size
        if tokenizer is not None:
            out["vocab_size"] = tokenizer.vocab_size
        return out

    def line(self) -> str:
        """One log line: ``target: char — …``."""
        return f"tokenizer {self.side}: {self.kind} — {self.reason}"


def side_stats(texts: list[str]) -> dict:
    """What the rule reads: texts, whitespace-token types and count, alphabet, length percentiles."""
    words = Counter(w for t in texts for w in t.split())
    chars = {c for t in texts for c in t}
    n_words = sum(words.values())
    return {
        "texts": len(texts), "word_types": len(words), "words": n_words,
        "mean_occurrences": round(n_words / max(1, len(words)), 1), "alphabet": len(chars),
        "p95_chars": int(np.percentile([len(t) for t in texts], 95)) if texts else 0,
        "p95_words": int(np.percentile([len(t.split()) for t in texts], 95)) if texts else 0,
        "frequent_word_types": sum(1 for c in words.values() if c >= SUBWORD_MIN_COUNT),
    }


def subword_size(stats: dict, max_vocab: int) -> int:
    """The BPE vocabulary the split supports: frequent whitespace tokens, within [alphabet + extra, max_vocab]."""
    floor = stats["alphabet"] + len(SPECIALS) + SUBWORD_MIN_EXTRA
    return int(min(max_vocab, max(floor, stats["frequent_word_types"])))


def choose_tokenizer(texts: Iterable[str], side: str, *, override: str = "auto", max_vocab: int = 2000) -> TokenizerChoice:
    """The tokenization of one side (``side`` names it in messages: "source" or "target")."""
    if override not in KINDS:
        raise ValueError(f"tokenizer must be one of {list(KINDS)}, got {override!r}; e.g. --set tokenizer='\"char\"'")
    if isinstance(max_vocab, bool) or not isinstance(max_vocab, int) or max_vocab <= len(SPECIALS):
        raise ValueError(f"max_vocab (the largest subword vocabulary, --set vocab_size=N) must be an int > {len(SPECIALS)}, got {max_vocab!r}")
    texts = list(texts)
    if not any(t.strip() for t in texts):
        raise ValueError(f"the {side} side has no non-blank training text; give a TSV with text on both sides of the tab")
    s = side_stats(texts)
    closed = s["word_types"] <= WORD_TYPES_MAX and s["mean_occurrences"] >= MIN_OCCURRENCES
    short_alphabet = s["alphabet"] <= CHAR_ALPHABET_MAX and s["p95_chars"] <= CHAR_LENGTH_MAX
    words_why = (f"{s['word_types']} distinct whitespace tokens (<= {WORD_TYPES_MAX}), each seen {s['mean_occurrences']:g} times "
                 f"on average (>= {MIN_OCCURRENCES})")
    chars_why = (f"{s['alphabet']} distinct characters (<= {CHAR_ALPHABET_MAX}), 95 % of texts <= {s['p95_chars']} characters "
                 f"(<= {CHAR_LENGTH_MAX})")
    if override != "auto":
        kind, reason = override, "forced by tokenizer=" + override
    elif closed:
        kind, reason = "word", words_why
    elif short_alphabet:
        kind, reason = "char", chars_why + f"; not word: {s['word_types']} whitespace-token types seen {s['mean_occurrences']:g} times on average"
    else:
        kind = "subword"
        reason = (f"open vocabulary ({s['word_types']} whitespace-token types, {s['alphabet']} characters, 95 % of texts <= "
                  f"{s['p95_chars']} characters)")
    size = None
    if kind == "subword":
        size = subword_size(s, max_vocab)
        reason += (f"; BPE vocabulary {size}: {s['frequent_word_types']} tokens seen >= {SUBWORD_MIN_COUNT} times, "
                   f"within [alphabet + {len(SPECIALS) + SUBWORD_MIN_EXTRA}, {max_vocab}]")
    return TokenizerChoice(side, kind, size, reason, s)


def choose_pair_tokenizers(train: list[tuple[str, str]], *, override: str = "auto", max_vocab: int = 2000):
    """(source choice, target choice, source tokenizer, target tokenizer) from the training pairs."""
    src = choose_tokenizer([s for s, _ in train], "source", override=override, max_vocab=max_vocab)
    tgt = choose_tokenizer([t for _, t in train], "target", override=override, max_vocab=max_vocab)
    return src, tgt, src.build(s for s, _ in train), tgt.build(t for _, t in train)
