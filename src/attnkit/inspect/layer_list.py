"""Per-layer attention weights as a list: the one input convention of the plots and the viewer.

Accepted: a sequence of per-layer (H, L, S) or (B, H, L, S) tensors/arrays (Hugging Face's
``output_attentions`` is one), or one stacked tensor (layers, H, L, S) / (layers, B, H, L, S).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from torch import Tensor


def as_layer_list(attentions) -> list:
    """``attentions`` as a non-empty list of per-layer weights (not yet converted or checked)."""
    if isinstance(attentions, (Tensor, np.ndarray)):
        if attentions.ndim not in (4, 5):
            raise ValueError(
                "attentions as one tensor must be (layers, H, L, S) or (layers, B, H, L, S); got shape "
                f"{tuple(attentions.shape)}. A single layer's (H, L, S) goes in a list: [weights]."
            )
        return list(attentions)
    if not isinstance(attentions, Sequence) or isinstance(attentions, str) or len(attentions) == 0:
        raise ValueError("attentions must be a non-empty sequence of per-layer (H, L, S) or (B, H, L, S) weights")
    return list(attentions)
