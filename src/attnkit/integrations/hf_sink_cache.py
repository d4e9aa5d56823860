"""StreamingLLM's sink cache for Hugging Face ``transformers`` (5.x) Llama-family models.

Xiao et al. 2023, https://arxiv.org/abs/2309.17453. ``transformers`` removed its ``SinkCache`` in
v5 (PR #41107); this one keeps the first ``sinks`` tokens and the last ``window`` (the current one
included) and follows the paper's **position rule**: the kept tokens sit at positions 0..n-1 *in
the cache*, so each step computes what the model computes when run fresh on the kept tokens.

    cache = SinkCache(4, 1020, config=model.config)
    out = model.generate(ids, past_key_values=cache, max_new_tokens=4096)

How the rule is kept with a model that rotates keys before the cache sees them: the layer reads
the positions the model used (``position_ids``, or the cache length when the model derives them),
un-rotates the new keys (RoPE is a rotation: R(−p)·R(p) = I) and stores them raw. On every call it
returns the kept keys rotated so that the newest sits at the query's own position ``P`` and key j
of n at ``P − (n−1) + j``. RoPE logits depend only on ``pos_q − pos_k``, so these are exactly the
logits at in-cache positions 0..n-1 (Su et al. 2021 §3.4), whatever ``P`` is (``generate`` counts
positions from the start of the text). After the call the layer keeps the sinks and the last
``window − 1`` tokens, so the next token fits: the cache never holds more than ``sinks + window``
during a one-token step, and ``sinks + window − 1`` between calls.

All rows of a batch keep the same slots (a left-padded prompt's padding counts as tokens and may
become a sink), so use it with one sequence or unpadded rows; :class:`attnkit.cache.SinkCache`
handles rows of different lengths.

The rotation is the model's own (``LlamaRotaryEmbedding(config)``: its ``rope_theta`` and
frequency scaling); scalings that also rescale cos/sin (``attention_scaling`` ≠ 1, YaRN) are refused.

Shape legend: keys/values (B, Hkv, L, D) per layer; positions (B|1, L).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), -1)


class _Rope:
    """The model's RoPE as a function of (x, positions), and its inverse."""

    def __init__(self, config):
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        self.emb = LlamaRotaryEmbedding(config)
        if self.emb.attention_scaling != 1.0:
            raise ValueError(f"SinkCache re-rotates keys, which needs cos/sin without a scale; this config's RoPE "
                             f"({getattr(config, 'rope_parameters', None)}) scales them by {self.emb.attention_scaling}")

    def __call__(self, x: torch.Tensor, pos: torch.Tensor, sign: float = 1.0) -> torch.Tensor:
        cos, sin = self.emb(x, pos)  # (B|1, L, D)
        cos, sin = cos[:, None].to(x.dtype), sin[:, None].to(x.dtype)
        return x * cos + sign * _rotate_half(x) * sin


class SinkLayer(CacheLayerMixin):
    """One layer's sinks and window; keys stored before rotary."""

    is_sliding = False
    is_compileable = False

    def __init__(self, sinks: int, window: int, rope: _Rope):
        super().__init__()
        self.sinks, self.window, self.rope = sinks, window, rope

    def lazy_initialization(self, key_states, value_states) -> None:
        self.keys, self.values = key_states[..., :0, :], value_states[..., :0, :]
        self.device, self.dtype = key_states.device, key_states.dtype
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        L = key_states.shape[-2]
        pos = (kwargs.get("kwargs") or {}).get("position_ids")
        if pos is None:  # the model derived positions from the cache length
            pos = torch.arange(self.get_seq_length(), self.get_seq_length() + L, device=key_states.device)[None]
        raw = torch.cat([self.keys, self.rope(key_states, pos, -1.0)], -2)  # (B, Hkv, n, D) un-rotated
        values = torch.cat([self.values, value_states], -2)
        n = raw.shape[-2]
        at = pos[:, -1:] - (n - 1) + torch.arange(n, device=raw.device)[None]  # newest key at the query's position
        keys = self.rope(raw, at)
        if n > self.sinks + self.window - 1:  # keep what the next token's window still holds
            keep = torch.cat([torch.arange(self.sinks), torch.arange(n - self.window + 1, n)]).to(raw.device)
            raw, values_kept = raw[..., keep, :], values[..., keep, :]
        else:
            values_kept = values
        self.keys, self.values = raw, values_kept
        return keys, values

    def get_seq_length(self) -> int:
        return 0 if not self.is_initialized else self.keys.shape[-2]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.get_seq_length() + query_length, 0

    def get_max_length(self) -> int:
        return -1  # the stream has no end; the cache's size is bounded by eviction instead


class SinkCache(Cache):
    """``past_key_values`` that keeps the first ``sinks`` and last ``window`` tokens of every layer,
    at positions in the cache. ``config``: the model's config (its RoPE)."""

    def __init__(self, sinks: int = 4, window: int = 1020, *, config):
        if isinstance(sinks, bool) or not isinstance(sinks, int) or sinks < 0:
            raise ValueError(f"sinks must be an int >= 0 (StreamingLLM keeps 4), got {sinks!r}")
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"window must be an int >= 1 (recent tokens kept, the current one included), got {window!r}")
        self.sinks, self.window = sinks, window
        rope = _Rope(config)
        super().__init__(layers=[SinkLayer(sinks, window, rope) for _ in range(config.num_hidden_layers)])
