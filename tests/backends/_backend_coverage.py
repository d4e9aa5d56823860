"""Which backend serves which case: the table the parity and property tests are generated from.

A case is a (score, mask, bias) from ``_core_cases``'s vocabulary, whether attention weights are
asked for, and whether L == S. ``SERVES[name]`` lists what a backend serves; every other case it
must decline through ``supports(call)``. ``test_backend_coverage.py`` checks the table against
every registered backend's ``supports`` for every case, so a backend that starts declining a case
it used to serve fails there (and in the parity test for that case), instead of turning a parity
test into a skip. A newly registered backend fails until it has a row here.
"""

from __future__ import annotations

from dataclasses import dataclass

from _core_cases import BIASES, MASKS, SCORES

ALL_SCORES = frozenset(SCORES)
ALL_MASKS = frozenset(MASKS)
ALL_BIASES = frozenset(BIASES)


@dataclass(frozen=True)
class Serves:
    """The cases a backend serves. ``masks_rect``: the masks it serves when L != S, if fewer."""

    scores: frozenset = ALL_SCORES
    masks: frozenset = ALL_MASKS
    biases: frozenset = ALL_BIASES
    weights: bool = True
    masks_rect: frozenset | None = None

    def __call__(self, score: str, mask: str, bias: str, weights: bool = False, square: bool = False) -> bool:
        masks = self.masks if square or self.masks_rect is None else self.masks_rect
        return score in self.scores and mask in masks and bias in self.biases and (self.weights or not weights)


SERVES = {
    "reference": Serves(),
    "blockwise": Serves(),
    # SDPA: dot-form scores (no additive), additive biases only (no score_mod such as softcap), no weights
    "sdpa": Serves(scores=ALL_SCORES - {"additive"}, biases=ALL_BIASES - {"softcap"}, weights=False),
    # linear attention (approximate): no bias, no weights, a causal mask only when L == S
    **{
        name: Serves(scores=ALL_SCORES - {"additive"}, masks=frozenset({"none", "causal_br", "causal_tl"}),
                     masks_rect=frozenset({"none"}), biases=frozenset({"none"}), weights=False)
        for name in ("linear", "linear_favor")
    },
}


def served(backend: str, score: str, mask: str, bias: str, weights: bool = False, square: bool = False) -> bool:
    """Whether the table says ``backend`` (``blockwise@2x3`` counts as ``blockwise``) serves the case."""
    return SERVES[backend.split("@")[0]](score, mask, bias, weights, square)
