"""Leak-proofing: a masked key or value never reaches the output or a gradient, whatever it holds.

Masking the scores is not enough. A masked key holding NaN or ±inf gives a NaN score, which the
-inf fill replaces; but its value row still enters ``p @ v``, and ``0 * NaN`` (or ``0 * inf``) is
NaN. The same happens in the backward (``dS @ k``, ``dO @ vᵀ``). So on every partly masked tile
the key and value rows that no query of the tile may see are replaced by 0 with ``torch.where``
(a select, not a product: NaN does not survive it, and its gradient is 0 there).

A key that some query of the tile may see is kept: if it holds NaN, the queries that see it get
NaN, as in the reference; its other queries in the same tile also do (the matmul cannot tell them
apart). Whole-key masks — padding, documents, any key no query of a tile sees — are exact.

Shape legend: allowed (b, h, l, s) with b ∈ {1, B}, h ∈ {1, H}; kt (B, Hkv, s, E); vt (B, Hkv, s, Ev).
"""

from __future__ import annotations

import torch

from ....core.masks import values_readable

__all__ = ["live_keys", "dead_filter", "drop_dead", "live_key_rows"]


def live_keys(allowed: torch.Tensor, Hkv: int) -> torch.Tensor:
    """(b, Hkv or 1, s, 1) bool: True for a key some query of the tile (in any head sharing its kv
    head) may see."""
    col = allowed.any(-2)  # (b, h, s)
    h = col.shape[1]
    if h > 1 and h != Hkv:  # GQA: h query heads read Hkv kv heads in groups of h // Hkv
        col = col.reshape(col.shape[0], Hkv, h // Hkv, col.shape[-1]).any(2)
    return col.unsqueeze(-1)


def dead_filter(allowed: torch.Tensor, Hkv: int, cache: dict) -> torch.Tensor | None:
    """``live_keys`` of a tile, or None when every key of the tile is live (nothing to zero: most
    tiles of causal and window masks). ``cache`` is keyed by the ``allowed`` object, which the plan
    reuses along a diagonal for shift-invariant masks. Reads the mask's values only (never q, k, v);
    on meta tensors, whose values cannot be read, it always filters."""
    key = id(allowed)
    if key in cache and cache[key][0] is allowed:
        return cache[key][1]
    live = live_keys(allowed, Hkv)
    if values_readable(live) and bool(live.all()):
        live = None
    if len(cache) > 64:
        cache.clear()
    cache[key] = (allowed, live)
    return live


def drop_dead(live: torch.Tensor, *tiles: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The tiles with rows of dead keys (``live`` False) replaced by 0."""
    return tuple(torch.where(live, t, 0.0) for t in tiles)


def live_key_rows(mask, code_rows, B: int, H: int, Hkv: int, L: int, S: int, bq: int, bk: int, device) -> torch.Tensor:
    """(B or 1, Hkv or 1, S, 1) bool: keys some query may see, over the whole call.

    Needed only when a key is transformed before the tiles see it (cosine score: k/|k|): the
    transform's own backward would turn a dead key's NaN into a NaN gradient (0 · NaN), so such
    keys are zeroed before it. Evaluates the mask once more on partly masked tiles (O(tile) memory)."""
    from ...tiling import EMPTY, FULL  # noqa: PLC0415 - same package family, kept local to this helper
    from ....core.indices import index_grid  # noqa: PLC0415

    fn = mask.predicate(L, S)
    nb = B if "b" in mask.dims else 1
    nh = H if "h" in mask.dims else 1
    live = torch.zeros((nb, Hkv if nh > 1 else 1, S, 1), dtype=torch.bool, device=device)
    for qi, row in enumerate(code_rows):
        q0, q1 = qi * bq, min((qi + 1) * bq, L)
        for ki, code in enumerate(row):
            k0, k1 = ki * bk, min((ki + 1) * bk, S)
            if code == EMPTY:
                continue
            if code == FULL:
                live[:, :, k0:k1] = True
                continue
            g = index_grid((q0, q1), (k0, k1), batch=nb, heads=nh, device=device)
            allowed = torch.as_tensor(fn(g.b, g.h, g.q, g.kv), device=device)
            live[:, :, k0:k1] |= live_keys(allowed.expand(nb, nh, q1 - q0, k1 - k0), Hkv)
    return live
