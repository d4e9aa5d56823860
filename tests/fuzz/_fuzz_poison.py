"""Non-finite values for the differential fuzz: the hostile values and the poisoning of an allowed position.

* ``HOSTILE`` — what ``_fuzz_judge`` writes where no query may look (dead keys and values,
  never-allowed bias entries, query rows with no allowed key), on the backend's inputs only: the
  oracle sees the clean tensors, so any influence is a leak.
* :func:`poison` — a NaN written into one allowed position of q, k, v or a dense bias, on the
  tensors the oracle and the backends both get: the oracle's output says where it must show
  (``_float64_oracle``: its row, or its value column in the rows that may see its key).

Shape legend: q (B, H, L, E), k (B, Hkv, S, E), v (B, Hkv, S, Ev), allowed (B, H, L, S).
"""

from __future__ import annotations

import math

import numpy as np
import torch

HOSTILE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "1e38": 1e38}


def poison(b, spec: dict, ok: np.ndarray, g: torch.Generator) -> bool:
    """Write ``spec["value"]`` into one allowed position of ``spec["tensor"]`` (q: a query row with an
    allowed key; k, v: a key some query may see; bias: a dense bias entry some (b, h) allows), in
    place, for the oracle and the backends alike. False when the tensor has no such position (no
    dense bias, everything masked): the case is then clean."""
    val = HOSTILE[spec["value"]]
    B, H, L, S = ok.shape

    def pick(cands: np.ndarray):
        idx = np.argwhere(cands)
        return None if len(idx) == 0 else tuple(int(x) for x in idx[int(torch.randint(len(idx), (1,), generator=g))])

    name = spec["tensor"]
    if name == "q":
        at = pick(ok.any(-1))  # (b, h, i)
        if at is not None:
            b.q[at + (int(torch.randint(b.q.shape[-1], (1,), generator=g)),)] = val
    elif name in ("k", "v"):
        t = b.k if name == "k" else b.v
        at = pick(~b.dead)  # (b, hkv, j)
        if at is not None:
            t[at + (int(torch.randint(t.shape[-1], (1,), generator=g)),)] = val
    else:
        dense = [i for i, o in enumerate(b.oracle_biases) if o["kind"] == "tensor"]
        at = pick(ok.any(axis=(0, 1))) if dense else None  # (i, j)
        if at is not None:
            i = dense[-1]
            data = b.oracle_biases[i]["data"]
            idx = at if data.ndim == 2 else (slice(None), slice(None)) + at
            data[idx] = val
            parts = b.bias if isinstance(b.bias, list) else [b.bias]  # a tensor bias goes to attnkit as the tensor
            parts[i][idx] = val
    return at is not None
