"""Any parallel corpus as a TSV file of ``source<TAB>target`` lines (``--data PATH.tsv``).

The format is the lowest common denominator of parallel text: one pair per line, the source, one
tab, the target, UTF-8. Blank lines are skipped; a line with no tab, an empty side, or more than
one tab (which would make the split ambiguous) is an error naming the file and line, because a
silently dropped or mis-split line shifts every later pair and corrupts the whole corpus.

Splitting (:func:`split_tsv_pairs`) is by a hash of the source line, so duplicates of a source
always land in one split and a re-run assigns every line the same way.

Shape legend: pairs are (source, target) strings.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def load_tsv_pairs(path: str | os.PathLike, *, max_pairs: int | None = None) -> list[tuple[str, str]]:
    """(source, target) pairs from ``path``; raises a ValueError naming the line of any malformed one."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"--data {str(p)!r}: no such file; give a TSV of 'source<TAB>target' lines, or --data dates / --data bible")
    if not p.is_file():
        raise ValueError(f"--data {str(p)!r} is not a file; give a TSV of 'source<TAB>target' lines")
    pairs = []
    with open(p, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            n_tabs = line.count("\t")
            if n_tabs != 1:
                what = "no tab" if n_tabs == 0 else f"{n_tabs} tabs"
                raise ValueError(
                    f"{p}:{lineno}: expected one 'source<TAB>target' pair per line, got {what} in {_show(line)}; "
                    "separate source and target with exactly one tab character"
                )
            src, tgt = (s.strip() for s in line.split("\t"))
            if not src or not tgt:
                side = "source" if not src else "target"
                raise ValueError(f"{p}:{lineno}: the {side} side is empty in {_show(line)}; every line needs text on both sides of the tab")
            pairs.append((src, tgt))
            if max_pairs is not None and len(pairs) >= max_pairs:
                break
    if not pairs:
        raise ValueError(f"{p} holds no 'source<TAB>target' pairs (the file is empty or blank); add at least one line")
    return pairs


def split_tsv_pairs(
    pairs: list[tuple[str, str]], *, valid_fraction: float = 0.05, test_fraction: float = 0.1, seed: int = 0
) -> dict[str, list[tuple[str, str]]]:
    """train/valid/test by a hash of (seed, source): one source never sits in two splits."""
    if not (0 <= valid_fraction < 1 and 0 < test_fraction < 1 and valid_fraction + test_fraction < 1):
        raise ValueError(f"valid_fraction and test_fraction must be in [0, 1) with a sum < 1, got {valid_fraction}, {test_fraction}")
    out: dict[str, list[tuple[str, str]]] = {"train": [], "valid": [], "test": []}
    for s, t in pairs:
        u = int(hashlib.sha1(f"{seed}:{s}".encode()).hexdigest()[:8], 16) / 16**8
        out["test" if u < test_fraction else "valid" if u < test_fraction + valid_fraction else "train"].append((s, t))
    if len(pairs) >= 3 and not out["train"]:
        raise ValueError(f"the split left no training pairs out of {len(pairs)}; lower test_fraction/valid_fraction")
    return out


def _show(line: str, width: int = 60) -> str:
    return repr(line if len(line) <= width else line[:width] + "…")
