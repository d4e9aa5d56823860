"""The playground's decoder: a tiny character-level causal LM, trained at first use and cached.

The model is :class:`attnkit.models.toy_decoder.ToyDecoder` (2 pre-norm blocks, 4 heads, width 64,
rotary positions) — small enough to train on one CPU thread in a few seconds, real enough that its
keys and values go through :mod:`attnkit.cache` like any decoder's. It learns next-character
prediction on the Book of Genesis (King James Version, read offline from the SWORD module of the
Debian package ``sword-text-kjv`` through ``pysword``); without those it falls back to the Zen of
Python, which every Python ships (``this.s``, ROT13-encoded). The text is small and the training
short: the model spells English-looking words, no more; the point is the cache, not the prose.

Training: AdamW, learning rate 1e-2, batches of 16 windows of 64 characters, seed 0, stopping at
``TRAIN_STEPS`` steps or ``TRAIN_SECONDS`` seconds, whichever comes first. The weights, the
vocabulary and how training went are saved under the user cache folder
(``$ATTNKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/attnkit``, else ``~/.cache/attnkit``) in
``serve/char_decoder_v1.pt`` and read back on the next start (``torch.load(weights_only=True)``).
"""

from __future__ import annotations

import codecs
import contextlib
import io
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ..models.toy_decoder import ToyDecoder

TRAIN_STEPS = 300
TRAIN_SECONDS = 6.0
SEQ, BATCH, LR = 64, 16, 1e-2
ARCH = {"dim": 64, "num_heads": 4, "num_layers": 2, "position": "rope", "max_positions": 1024}
FILE = "serve/char_decoder_v1.pt"
CHAPTERS = range(1, 6)


def cache_dir() -> Path:
    """The user cache folder attnkit writes derived files to."""
    if os.environ.get("ATTNKIT_CACHE_DIR"):
        return Path(os.environ["ATTNKIT_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "attnkit"


def training_text() -> tuple[str, str]:
    """(text, where it came from): Genesis 1-5 (KJV) when pysword and the SWORD module are installed,
    else the Zen of Python. Five chapters (~17k characters) read in well under a second."""
    try:
        from pysword.modules import SwordModules

        from ..data.bible import MODULES, SWORD_PATH, clean_verse

        module = MODULES["en"][0]
        mods = SwordModules(SWORD_PATH)
        mods.parse_modules()
        bible = mods.get_bible_from_module(module)
        verses = bible.get_iter(books=["Gen"], chapters=list(CHAPTERS), clean=True)
        return " ".join(clean_verse(v) for v in verses), f"Genesis 1-{CHAPTERS[-1]}, King James Version (SWORD module {module})"
    except Exception:  # noqa: BLE001 - any missing piece (pysword, the module) means the fallback text
        with contextlib.redirect_stdout(io.StringIO()):  # importing `this` prints the poem
            import this
        return codecs.decode(this.s, "rot13"), "The Zen of Python (the standard library's `this` module)"


@dataclass
class CharDecoder:
    """A trained :class:`ToyDecoder` with its character vocabulary (index = token id)."""

    model: ToyDecoder
    vocab: list[str]
    meta: dict

    def encode(self, text: str) -> tuple[list[int], list[str]]:
        """Token ids of ``text``; characters outside the vocabulary become spaces (and are listed)."""
        index = {c: i for i, c in enumerate(self.vocab)}
        unknown = sorted({c for c in text if c not in index})
        space = index.get(" ", 0)
        return [index.get(c, space) for c in text], unknown


@torch.enable_grad()  # a first request may arrive inside torch.no_grad()
def _train(text: str, steps: int, seconds: float) -> tuple[ToyDecoder, list[str], dict]:
    vocab = sorted(set(text))
    index = {c: i for i, c in enumerate(vocab)}
    data = torch.tensor([index[c] for c in text], dtype=torch.long)
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = ToyDecoder(vocab_size=len(vocab), **ARCH)
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    t0, done, loss = time.perf_counter(), 0, float("nan")
    model.train()
    while done < steps and time.perf_counter() - t0 < seconds:
        starts = torch.randint(0, len(data) - SEQ - 1, (BATCH,), generator=g)
        x = torch.stack([data[s:s + SEQ] for s in starts])  # (B, T)
        y = torch.stack([data[s + 1:s + SEQ + 1] for s in starts])
        out = F.cross_entropy(model(x).reshape(-1, len(vocab)), y.reshape(-1))
        opt.zero_grad()
        out.backward()
        opt.step()
        done, loss = done + 1, out.detach().item()
    meta = {"steps": done, "seconds": round(time.perf_counter() - t0, 2), "final_loss": round(loss, 3)}
    return model.eval(), vocab, meta


def load_char_decoder(*, steps: int = TRAIN_STEPS, seconds: float = TRAIN_SECONDS, folder: Path | None = None) -> CharDecoder:
    """The cached decoder, training (and caching) it first when there is none."""
    path = (cache_dir() if folder is None else Path(folder)) / FILE
    if path.is_file():
        try:
            saved = torch.load(path, weights_only=True)
            model = ToyDecoder(vocab_size=len(saved["vocab"]), **ARCH)
            model.load_state_dict(saved["state"])
            return CharDecoder(model.eval(), list(saved["vocab"]), dict(saved["meta"]))
        except Exception:  # noqa: BLE001 - an unreadable or stale file is retrained and overwritten
            pass
    text, source = training_text()
    model, vocab, meta = _train(text, steps, seconds)
    meta.update(source=source, characters=len(text))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save({"state": model.state_dict(), "vocab": vocab, "meta": meta}, tmp)
    tmp.replace(path)  # atomic: a second server never reads a half-written file
    return CharDecoder(model, vocab, meta)
