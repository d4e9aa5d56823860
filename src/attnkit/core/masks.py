"""Composable attention masks with one polarity: ``True`` means *may attend* — the public vocabulary.

This module is a facade: it holds no mask of its own and imports every one, so
``attnkit.masks.causal()`` (and ``attnkit.core.masks.<name>``) is the one spelling users need. Where
each lives:

* :mod:`.mask_base` — the :class:`Mask` base class (predicate, tile states, composition,
  materialization) and :func:`as_mask`, what users pass as ``mask=``;
* :mod:`.mask_algebra` — ``&``, ``|``, ``~`` of masks;
* :mod:`.mask_kinds` — causal (explicit alignment), sliding window, document, prefix-LM;
* :mod:`.mask_chunked` — chunked causal attention (Llama 4);
* :mod:`.mask_values` — a dense bool tensor, a custom predicate (tile-skipping, cached tile map);
* :mod:`.mask_convert` — key padding, and the conversions from other libraries' polarity:
  ``from_attention_mask`` (Hugging Face 0/1, 1 = keep), ``from_key_padding_mask``
  (``torch.nn.MultiheadAttention``, True = ignore).

A new kind subclasses :class:`Mask` in a module of its own and is added to the imports below.

Shape legend: B batch, H heads, L queries, S keys.
"""

from __future__ import annotations

from .mask_algebra import AndMask, NotMask, OrMask
from .mask_base import ALIGNS, Mask, Predicate, as_mask, from_cache_key
from .mask_base import values_readable  # noqa: F401  (not public: the backends' check, importable from here)
from .mask_chunked import ChunkedMask, chunked
from .mask_convert import KeyPaddingMask, from_attention_mask, from_key_padding_mask, padding_mask
from .mask_kinds import CausalMask, DocumentMask, KeyPrefixMask, SlidingWindowMask, causal, document, prefix_lm, sliding_window
from .mask_values import CustomMask, TensorMask, custom

__all__ = [
    # mask_base, mask_algebra
    "ALIGNS",
    "Predicate",
    "Mask",
    "AndMask",
    "OrMask",
    "NotMask",
    "as_mask",
    "from_cache_key",
    # mask_kinds, mask_chunked
    "CausalMask",
    "SlidingWindowMask",
    "KeyPrefixMask",
    "DocumentMask",
    "ChunkedMask",
    "causal",
    "sliding_window",
    "document",
    "prefix_lm",
    "chunked",
    # mask_values
    "TensorMask",
    "CustomMask",
    "custom",
    # mask_convert
    "KeyPaddingMask",
    "padding_mask",
    "from_attention_mask",
    "from_key_padding_mask",
]
