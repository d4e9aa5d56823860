"""JSON text of a large array of attention weights, written by NumPy instead of ``json.dumps``.

A 100-token request returns 6 layers × 12 heads × 102 × 102 ≈ 750k weights. ``json.dumps`` of
that many Python floats takes about 0.8 s on one CPU thread — most of the 1 s budget — because it
formats each float with ``repr``. Weights lie in [0, 1], so a fixed-point text is exact enough and
can be built as bytes by array arithmetic: each weight becomes ``round(w · 10^6)`` (an integer
``n`` in [0, 10^6]) written as the nine bytes ``I.dddddd,`` where ``I = n // 10^6`` and the
digits are ``(n // 10^k) mod 10``. The error is at most ``0.5 · 10^-6`` per weight.

The nesting brackets are added around each last-axis row, and the rows are joined level by level.
The text parses with any JSON reader to the same nested lists ``json.dumps(np.round(w, 6).tolist())``
would give (a test compares them).

Shape legend: any shape (..., S); the last axis becomes the innermost list.
"""

from __future__ import annotations

import json
import secrets

import numpy as np

DECIMALS = 6
_SCALE = 10**DECIMALS
_WIDTH = DECIMALS + 3  # "I", ".", DECIMALS digits, then "," or "]"


def unit_json(weights: np.ndarray) -> str:
    """JSON nested lists of ``weights`` (values in [0, 1], NaN-free), each rounded to 6 decimals."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim == 0 or w.shape[-1] == 0:
        raise ValueError(f"weights must be an array with a non-empty last axis, got shape {w.shape}")
    if not np.isfinite(w).all() or w.min() < 0 or w.max() > 1:
        raise ValueError("weights must be finite and lie in [0, 1] (attention probabilities); got values outside it")
    n = np.rint(w * _SCALE).astype(np.int64)  # (..., S) fixed point
    S = w.shape[-1]
    rows = n.reshape(-1, S)
    out = np.empty((rows.shape[0], S, _WIDTH), dtype=np.uint8)
    out[:, :, 0] = ord("0") + rows // _SCALE
    out[:, :, 1] = ord(".")
    for k in range(DECIMALS):  # digit k after the point
        out[:, :, 2 + k] = ord("0") + (rows // 10 ** (DECIMALS - 1 - k)) % 10
    out[:, :, -1] = ord(",")
    out[:, -1, -1] = ord("]")
    text = out.reshape(rows.shape[0], -1)
    lines = ["[" + r.tobytes().decode("ascii") for r in text]  # each "[...]" one last-axis row
    for size in reversed(w.shape[:-1]):  # join rows into the enclosing lists, innermost first
        lines = ["[" + ",".join(lines[i:i + size]) + "]" for i in range(0, len(lines), size)]
    return lines[0]


class RawJSON(str):
    """JSON text that :func:`dumps` splices into its output as is (e.g. from :func:`unit_json`)."""


def dumps(obj) -> str:
    """``json.dumps(obj)`` with every :class:`RawJSON` value inserted verbatim instead of quoted.

    Each raw value is first replaced by a placeholder string with a random tag (so no text of the
    request can collide with it), then the quoted placeholder is swapped for the raw text."""
    raws: dict[str, str] = {}
    tag = secrets.token_hex(8)

    def swap(o):
        if isinstance(o, RawJSON):
            key = f"@@raw-{tag}-{len(raws)}@@"
            raws[key] = str(o)
            return key
        if isinstance(o, dict):
            return {k: swap(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [swap(v) for v in o]
        return o

    text = json.dumps(swap(obj), ensure_ascii=False, allow_nan=False)
    for key, raw in raws.items():
        text = text.replace(f'"{key}"', raw, 1)
    return text
