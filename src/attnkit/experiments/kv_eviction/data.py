"""The text of ``kv_eviction``: the King James Bible as characters, split by book.

The KJV (Debian ``sword-text-kjv``, read through :func:`attnkit.data.bible.load_bible_pairs`) is
laid out one chapter per line, verses joined by spaces. Whole books go to the evaluation stream
(``split_pairs(by="book")``'s test books), the rest to training, so no verse is in both.

Training windows **begin at a sequence start**: each is ``BOS`` followed by ``context`` characters
from the beginning of a verse, at positions 0..context. That is how StreamingLLM's models were
trained (Xiao et al. 2023, https://arxiv.org/abs/2309.17453 §3.1): the first position always holds
the same token, and a model may learn to park attention there. The evaluation stream is one
``BOS`` then text many times longer than ``context``.

Shape legend: a window is (context + 1,) token ids; a stream (B, T).
"""

from __future__ import annotations

from pathlib import Path

import torch

BOS, UNK = 0, 1  # ids 0 and 1; characters start at 2


class CharVocab:
    """Characters ↔ ids; an unseen character (``--data``) maps to UNK."""

    def __init__(self, text: str):
        self.chars = sorted(set(text))
        self.index = {c: i + 2 for i, c in enumerate(self.chars)}

    def __len__(self) -> int:
        return len(self.chars) + 2

    def encode(self, text: str) -> torch.Tensor:
        return torch.tensor([self.index.get(c, UNK) for c in text], dtype=torch.long)


def bible_texts(cache_dir: str | Path, books: list[str] | None = None) -> tuple[str, str, list[int]]:
    """(train text, evaluation text, offsets of the training verses' starts); ``books``: only these
    (the tests' tiny size reads a few short books in a second instead of the whole Bible)."""
    from ...data.bible import load_bible_pairs, split_pairs

    pairs = load_bible_pairs(cache_dir=cache_dir) if books is None else load_bible_pairs(books=tuple(books))
    split = split_pairs(pairs, by="book", valid_fraction=0.0, test_fraction=0.1 if books is None else 1 / len(books))
    return _layout(split["train"])[0], _layout(split["test"])[0], _layout(split["train"])[1]


def _layout(pairs) -> tuple[str, list[int]]:
    parts, starts, n, chapter = [], [], 0, None
    for p in pairs:
        sep = "" if chapter is None else (" " if (p.book, p.chapter) == chapter else "\n")
        chapter = (p.book, p.chapter)
        n += len(sep)
        starts.append(n)
        parts.append(sep + p.en)
        n += len(p.en)
    return "".join(parts), starts


def training_windows(ids: torch.Tensor, starts: list[int], context: int, n: int, seed: int) -> torch.Tensor:
    """n windows (n, context + 1): BOS then ``context`` ids from randomly drawn verse starts."""
    g = torch.Generator().manual_seed(seed)
    ok = torch.tensor([s for s in starts if s + context <= len(ids)])
    pick = ok[torch.randint(len(ok), (n,), generator=g)]
    rows = ids[pick[:, None] + torch.arange(context)]  # (n, context)
    return torch.cat([torch.full((n, 1), BOS), rows], 1)


def eval_streams(ids: torch.Tensor, batch: int, length: int) -> torch.Tensor:
    """(batch, length) streams: BOS then ``length - 1`` ids, from evenly spaced offsets of ``ids``."""
    span = len(ids) - length
    if span < 0:
        raise ValueError(f"the evaluation text has {len(ids)} characters, fewer than the stream length {length}; "
                         f"pass a longer --data file or a smaller stream_len")
    offs = [span * i // max(1, batch - 1) for i in range(batch)] if batch > 1 else [0]
    rows = torch.stack([ids[o: o + length - 1] for o in offs])
    return torch.cat([torch.full((batch, 1), BOS), rows], 1)
