"""StreamingLLM's cache: the first ``sinks`` tokens and the last ``window``, at positions in the cache.

Xiao et al. 2023, "Efficient Streaming Language Models with Attention Sinks",
https://arxiv.org/abs/2309.17453 §3. Softmax must give every query weights that sum to 1, and a
trained model parks the weight it has no use for on the first tokens, which every training
sequence had (the *attention sink*). A window cache evicts those tokens once the text is longer
than the window, and with them the place where that weight went; keeping the first few (4 in the
paper) plus the recent window lets a model read an endless stream with a fixed cache.

**Positions are assigned within the cache** (§3.2): the kept tokens are at positions 0..n-1 in
the order they came, whatever their place in the text. Keys are therefore stored *before* rotary
and rotated at their position in the cache on every read (a key's in-cache position falls by one
each time a token before it is evicted); the new queries sit at the following positions. So a step
computes exactly what a fresh causal forward over the kept tokens, at positions 0..n-1, computes
for its last token. :class:`~attnkit.modules.multihead.MultiHeadAttention` sees
``positions_in_cache`` and does the rotation after :meth:`SinkCache.update` instead of before.

Eviction happens when new tokens arrive: each row keeps its first ``sinks`` tokens and as many of
its latest ones as leave room for the L new tokens in a window of ``window`` (the current token
included), then appends them. One token per call, a row never holds more than ``sinks + window``;
a chunk longer than the window is kept whole, after the sinks, until the next call.

Shape legend: B batch, Hkv key/value heads, L new tokens, S kept slots, E / Ev head dims.
"""

from __future__ import annotations

import torch

from ..core.checks import require_positive_int
from .cache_base import CacheView
from .cache_compact import _CompactCache


class SinkCache(_CompactCache):
    """The first ``sinks`` and the last ``window`` tokens of each row, at positions in the cache."""

    kind = "sink"
    positions_in_cache = True  # keys stored before rotary; MultiHeadAttention rotates at view.positions

    def __init__(self, sinks: int = 4, window: int = 1020):
        if isinstance(sinks, bool) or not isinstance(sinks, int) or sinks < 0:
            raise ValueError(f"sinks must be an int >= 0 (how many first tokens to keep; StreamingLLM uses 4), got {sinks!r}")
        self.sinks, self.window = sinks, require_positive_int("window", window)
        self.query_positions: torch.Tensor | None = None  # (B, L) in-cache positions of the last update's tokens
        super().__init__(sinks + window)

    def update(self, k, v, *, positions=None, valid=None) -> CacheView:
        """Evict to make room, store the L new tokens, and return the view at in-cache positions:
        ``view.positions`` (B, S) are 0..n-1 per row, and :attr:`query_positions` (B, L) those of the
        new tokens (a padding token gets the position the next real one would have)."""
        B, _, L, _ = k.shape
        count = torch.full((B,), L, dtype=torch.long, device=k.device) if valid is None else valid.sum(1).to(k.device)
        if self._k is not None:
            S = int(self.lengths.max())
            slot = torch.arange(S, device=k.device)[None, :]
            room = (self.window - count).clamp(min=0)[:, None]  # old non-sink tokens that still fit the window
            self._keep((slot < self.lengths[:, None]) & ((slot < self.sinks) | (slot >= self.lengths[:, None] - room)))
        before = torch.zeros(B, dtype=torch.long, device=k.device) if self.lengths is None else self.lengths.clone()
        view = super().update(k, v, positions=positions, valid=valid)
        ranks = torch.arange(L, device=k.device)[None, :].expand(B, L) if valid is None else valid.long().cumsum(1) - valid.long()
        self.query_positions = before[:, None] + ranks
        S = view.k.shape[2]
        return view._replace(positions=torch.arange(S, device=k.device)[None, :].expand(B, S))

    def __repr__(self) -> str:
        held = "empty" if self._k is None else f"B={self._k.shape[0]}, held={self.lengths.tolist()}"
        return f"SinkCache(sinks={self.sinks}, window={self.window}, {held})"
