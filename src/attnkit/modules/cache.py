"""Key/value caches for incremental decoding (public name: ``attnkit.cache``).

Vaswani et al. 2017, https://arxiv.org/abs/1706.03762 (autoregressive decoding); the cache itself
is folklore (Ott et al. 2019, fairseq, https://arxiv.org/abs/1904.01038). A causal decoder at step
t needs ``softmax(q_t K_{≤t}ᵀ) V_{≤t}``; the keys and values of earlier tokens never change (they
depend only on earlier tokens), so they are computed once, stored, and step t projects only its
own token: O(t) work per step instead of recomputing the O(t²) prefix.

Caches here (one object per attention layer):

* :class:`DynamicCache` — grows; buffers are preallocated and doubled when full (growing with
  ``torch.cat`` each step would copy the whole cache every token: O(t) copies per step).
* :class:`StaticCache` — ``max_len`` slots allocated once; writing past them raises.
* :class:`SlidingWindowCache` — a ring buffer of the last ``window`` tokens of each sequence
  (Mistral-style). **Keys are stored out of order**: each row writes its token with position p
  into slot ``p_count mod window`` and the cache keeps the absolute position of every slot, so
  attention masks by *position* (causal, window), never by slot index. No unrolling.
* :class:`CrossAttentionCache` — encoder keys/values, projected once and reused every step.

KV-cache compression (each in its own module, all with ``nbytes``):

* :class:`SinkCache` — StreamingLLM: the first ``sinks`` tokens and the last ``window``, at
  positions *in the cache* (keys stored before rotary);
* :class:`H2OCache` — the recent tokens and the heaviest hitters by accumulated attention;
* :class:`SnapKVCache` — the recent window and the keys its queries attend to, pooled;
* :class:`QuantizedCache` — every token, the older ones KIVI-packed to 8 or 4 bits.

**Batches with mixed prompt lengths.** Each row has its own count of real tokens
(``lengths``, shape (B,)) and its own next position. Only real tokens are written: a left- or
right-padded prompt is *compacted* into the cache, so row b's slots 0..lengths[b]-1 hold its
tokens and the rest are invalid. Every slot stores its absolute position (B, S) and validity
(B, S), and attention over the cache uses:

* a key-validity mask (:class:`~attnkit.core.masks.KeyPaddingMask`), AND
* the causal / window / user masks evaluated at absolute positions (:class:`PositionedMask`:
  ``q_idx``, ``kv_idx`` of the predicate become the absolute positions of query and key), AND
* a query-validity mask, so a padding query attends nothing (zeros, never NaN).

Biases are evaluated at absolute positions the same way (:class:`PositionedBias`), so ALiBi, T5
and Shaw biases see ``pos_q - pos_k``, not slot distances. When every row has the same length and
default positions (the common, unpadded case), slot s holds position s and the cache says so
(``CacheView.in_order``): then one new query may attend every cached key and no mask is built at
all, and a prompt uses the bottom-right causal mask that SDPA runs as ``is_causal``.

Caches are for inference: they write into preallocated buffers in place, so use them under
``torch.no_grad()`` / ``torch.inference_mode()``.

Layout: this module is the entry point and holds the string factory (:func:`make_cache`,
:data:`KINDS`); :mod:`~attnkit.modules.cache_base` has :class:`CacheView` and the
:class:`KVCache` base class, :mod:`~attnkit.modules.cache_kinds` the concrete caches, and
:mod:`~attnkit.modules.cache_positions` the position-aware masks and biases. Every name is
re-exported here.

Shape legend: B batch, Hkv key/value heads, L new tokens, S cached slots, E / Ev head dims.
"""

from __future__ import annotations

from ..core.checks import require_choice
from .cache_base import CacheView, KVCache
from .cache_h2o import H2OCache
from .cache_kinds import CrossAttentionCache, DynamicCache, SlidingWindowCache, StaticCache
from .cache_quantized import QuantizedCache
from .cache_sink import SinkCache
from .cache_snapkv import SnapKVCache
from .cache_positions import PositionedBias, PositionedMask, cache_mask

KINDS = {"dynamic": DynamicCache, "static": StaticCache, "sliding": SlidingWindowCache, "cross": CrossAttentionCache,
         "sink": SinkCache, "h2o": H2OCache, "snapkv": SnapKVCache, "quantized": QuantizedCache}


def make_cache(kind: str, **kwargs):
    """String factory: ``make_cache("static", max_len=2048)``, ``make_cache("sliding", window=256)``,
    ``make_cache("sink", sinks=4, window=1020)``, ``make_cache("h2o", budget=256, recent=128)``,
    ``make_cache("snapkv", budget=256, window=32, kernel=7)``, ``make_cache("quantized", bits=4, group=32, residual=32)``."""
    require_choice("kind", kind, tuple(KINDS))
    return KINDS[kind](**kwargs)


__all__ = [
    "CacheView", "KVCache", "DynamicCache", "StaticCache", "SlidingWindowCache", "CrossAttentionCache",
    "SinkCache", "H2OCache", "SnapKVCache", "QuantizedCache",
    "PositionedMask", "PositionedBias", "cache_mask", "make_cache", "KINDS",
]
