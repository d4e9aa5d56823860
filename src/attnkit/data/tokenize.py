"""Tokenizers for the seq2seq data: characters (dates), whitespace tokens and subwords (text).

Both share one contract so models, decoding and metrics never care which one they got:

* ids 0..3 are the special tokens ``PAD``, ``BOS``, ``EOS``, ``UNK`` (the same ids in every
  tokenizer, so a model built for one vocabulary size works with either);
* ``encode(text) -> list[int]`` (no BOS/EOS: the batcher adds them), ``decode(ids) -> str``
  (stops at the first EOS, skips specials), ``tokens(ids) -> list[str]`` (labels for heatmaps)
  and ``vocab_size``.

:class:`CharTokenizer` maps each character seen in the training texts to an id (unknown
characters become ``UNK``); :class:`WordTokenizer` does the same for whitespace-separated
tokens. :class:`SubwordTokenizer` trains a byte-pair-encoding model (Sennrich et al. 2016,
https://arxiv.org/abs/1508.07909) with the Hugging Face ``tokenizers`` library on the *training
split only*, so no test sentence shapes the vocabulary.

Shape legend: ids are plain Python lists; :func:`pad_batch` returns (B, T) long tensors.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")


class CharTokenizer:
    """One id per character seen in ``texts`` (sorted, so the same texts give the same ids)."""

    def __init__(self, texts: Iterable[str]):
        chars = sorted({c for t in texts for c in t})
        if not chars:
            raise ValueError("CharTokenizer needs at least one non-empty training text, got none; pass the training split's strings")
        self.itos = list(SPECIALS) + chars
        self.stoi = {c: i for i, c in enumerate(self.itos)}

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        return [self.stoi.get(c, UNK) for c in text]

    def decode(self, ids: Iterable[int]) -> str:
        return "".join(self.tokens(ids, stop_at_eos=True, keep_specials=False))

    def tokens(self, ids: Iterable[int], *, stop_at_eos: bool = False, keep_specials: bool = True) -> list[str]:
        out = []
        for i in ids:
            i = int(i)
            if stop_at_eos and i == EOS:
                break
            if i < len(SPECIALS) and not keep_specials:
                continue
            out.append(self.itos[i] if 0 <= i < len(self.itos) else SPECIALS[UNK])
        return out


class WordTokenizer(CharTokenizer):
    """One id per whitespace-separated token seen in ``texts`` (sorted); ``decode`` joins with one space."""

    def __init__(self, texts: Iterable[str]):
        words = sorted({w for t in texts for w in t.split()})
        if not words:
            raise ValueError("WordTokenizer needs at least one non-blank training text, got none; pass the training split's strings")
        self.itos = list(SPECIALS) + words
        self.stoi = {w: i for i, w in enumerate(self.itos)}

    def encode(self, text: str) -> list[int]:
        return [self.stoi.get(w, UNK) for w in text.split()]

    def decode(self, ids: Iterable[int]) -> str:
        return " ".join(self.tokens(ids, stop_at_eos=True, keep_specials=False))


class SubwordTokenizer:
    """Byte-pair encoding trained on ``texts`` with ``tokenizers`` (whitespace pre-split, NFKC)."""

    def __init__(self, texts: Iterable[str], vocab_size: int = 4000, *, min_frequency: int = 2):
        try:
            from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, decoders, trainers
        except ImportError as e:  # pragma: no cover - tokenizers is a dependency of the experiments
            from . import MissingData

            raise MissingData("the tokenizers library", install="pip install tokenizers") from e
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size <= len(SPECIALS):
            raise ValueError(f"vocab_size must be an int > {len(SPECIALS)} (the special tokens), got {vocab_size!r}")
        tok = Tokenizer(models.BPE(unk_token=SPECIALS[UNK]))
        tok.normalizer = normalizers.NFKC()
        # Metaspace keeps word boundaries inside the tokens, so decode() restores the spaces exactly
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(SPECIALS), show_progress=False)
        texts = list(texts)
        if not any(texts):
            raise ValueError("SubwordTokenizer needs non-empty training texts, got none; pass the training split's strings")
        tok.train_from_iterator(texts, trainer=trainer)
        self._tok = tok
        for i, s in enumerate(SPECIALS):  # the shared contract: specials at ids 0..3
            if tok.token_to_id(s) != i:  # pragma: no cover - BpeTrainer puts special_tokens first
                raise RuntimeError(f"tokenizers put {s!r} at id {tok.token_to_id(s)}, expected {i}")

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Iterable[int]) -> str:
        ids = [int(i) for i in ids]
        if EOS in ids:
            ids = ids[: ids.index(EOS)]
        return self._tok.decode([i for i in ids if i >= len(SPECIALS)])

    def tokens(self, ids: Iterable[int], *, stop_at_eos: bool = False, keep_specials: bool = True) -> list[str]:
        out = []
        for i in ids:
            i = int(i)
            if stop_at_eos and i == EOS:
                break
            if i < len(SPECIALS) and not keep_specials:
                continue
            out.append(self._tok.id_to_token(i) or SPECIALS[UNK])
        return out


def encode_pairs(pairs: Sequence[tuple[str, str]], src_tok, tgt_tok, *, max_len: int | None = None) -> list[tuple[list[int], list[int]]]:
    """(source, target) strings → (source ids, target ids); ``max_len`` truncates both sides."""
    out = []
    for s, t in pairs:
        a, b = src_tok.encode(s), tgt_tok.encode(t)
        if max_len is not None:
            a, b = a[:max_len], b[: max_len - 1]  # the target also carries BOS/EOS
        out.append((a or [UNK], b))
    return out


def pad_batch(seqs: Sequence[Sequence[int]], *, bos: bool = False, eos: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad id lists into (B, T) with PAD; returns (ids, lengths (B,))."""
    rows = [([BOS] if bos else []) + list(s) + ([EOS] if eos else []) for s in seqs]
    T = max(1, max(len(r) for r in rows))
    ids = torch.full((len(rows), T), PAD, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return ids, torch.tensor([len(r) for r in rows], dtype=torch.long)


def collate_pairs(batch: Sequence[tuple[Sequence[int], Sequence[int]]]) -> dict[str, torch.Tensor]:
    """A list of (source ids, target ids) → ``src`` (B, S), ``src_len`` (B,), ``tgt_in`` = BOS+y
    (B, T), ``tgt_out`` = y+EOS (B, T): teacher forcing shifts the target by one."""
    src, src_len = pad_batch([s for s, _ in batch])
    tgt_in, _ = pad_batch([t for _, t in batch], bos=True)
    tgt_out, _ = pad_batch([t for _, t in batch], eos=True)
    return {"src": src, "src_len": src_len, "tgt_in": tgt_in, "tgt_out": tgt_out}
