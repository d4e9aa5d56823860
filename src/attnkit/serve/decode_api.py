"""``POST /api/decode``: generate character by character and report what the KV cache keeps.

Each layer of the decoder (:mod:`attnkit.serve.char_model`) gets its own cache from
:func:`attnkit.cache.make_cache` — any registered kind, with the request's keyword arguments
(``{"kind": "sliding", "window": 16}``), so kinds added to ``make_cache`` later work here unchanged.
The prompt fills the caches in one forward pass; then each step samples one character from the
last logits and feeds it back, so step i's keys and values are written once and read by every
later step (Vaswani et al. 2017; the cache as in :mod:`attnkit.modules.cache`).

**Kept positions** — which absolute positions the cache holds when step i's character is
predicted — are read through a small protocol, first match wins:

1. the cache has a ``kept_positions()`` method: it returns them (a sequence of ints or a 1-D
   tensor; for a batched cache, row 0's) — eviction caches (sink, H2O, SnapKV) should define it;
2. the cache is an attnkit :class:`~attnkit.modules.cache_base.KVCache`: its position table,
   slots ``0 .. min(length, capacity) − 1`` (a sliding cache's ring holds the last ``window``);
3. anything else keeps every position, ``0 .. t − 1``.

Reported per step: the character, the kept positions of layer 0 (every layer's cache is built
the same way; caches that decide per layer may differ), and the bytes all layers' caches hold
(``nbytes``: key/value buffers plus position tables, as allocated — a dynamic cache doubles its
buffer when full, so the bytes grow in steps). Sampling is at ``temperature`` (0 = greedy) from a
generator seeded with ``seed``: the same request gives the same characters.

Shape legend: P prompt characters, T steps, V vocabulary.
"""

from __future__ import annotations

import time

import torch

from ..modules import cache as C
from ..modules.cache_base import KVCache
from . import limits as LIM
from .char_model import CharDecoder, load_char_decoder
from .limits import ApiError, Field

FIELDS = ("prompt", "steps", "cache", "temperature", "seed")


def self_attention_kinds() -> tuple[str, ...]:
    """Every kind ``make_cache`` knows now, less "cross" (a decoder-only model has no encoder);
    read per request, so kinds registered after import are offered too."""
    return tuple(k for k in C.KINDS if k != "cross")


def kept_positions(cache, t: int) -> list[int]:
    """Absolute positions ``cache`` holds after ``t`` tokens, by the protocol in the module docstring."""
    own = getattr(cache, "kept_positions", None)
    if callable(own):
        got = own()
        if isinstance(got, torch.Tensor):
            got = got[0] if got.dim() == 2 else got
            got = got.tolist()
        if got and isinstance(got[0], (list, tuple)):  # a batched cache's rows (attnkit's eviction caches): row 0
            got = got[0]
        return sorted(int(p) for p in got)
    if isinstance(cache, KVCache) and cache.initialized:
        # the base class's position table: slot s of row 0 holds position _pos[0, s]; a ring has
        # written min(tokens seen, capacity) slots, a linear cache `lengths` of its capacity
        n = min(int(cache.lengths[0]), cache.capacity)
        return sorted(int(p) for p in cache._pos[0, :n].tolist())
    return list(range(t))


def make_layer_caches(n_layers: int, spec) -> tuple[list, str, dict]:
    """One cache per layer from ``{"kind": ..., **kwargs}``; a 400 naming the kind or argument at fault."""
    if not isinstance(spec, dict):
        raise ApiError(f"cache must be an object like {{\"kind\": \"dynamic\"}}, got {spec!r}", field="cache")
    kwargs = dict(spec)
    kind = Field("cache.kind").require_choice(kwargs.pop("kind", "dynamic"), self_attention_kinds())
    for k, v in kwargs.items():
        if isinstance(v, (dict, list)) or v is None:
            raise ApiError(f"cache.{k} must be a number, string or boolean, got {v!r}", field=f"cache.{k}")
    try:
        return [C.make_cache(kind, **kwargs) for _ in range(n_layers)], kind, kwargs
    except (TypeError, ValueError) as e:  # an unknown keyword or a bad value, in the cache's own words
        raise ApiError(f"cache {kind!r} with {kwargs}: {e}", field="cache") from None


class DecodeService:
    """The character decoder, trained or read from the cache folder on first use (``loader()``)."""

    def __init__(self, decoder: CharDecoder | None = None, *, loader=load_char_decoder):
        self._decoder, self._loader = decoder, loader

    @property
    def decoder(self) -> CharDecoder:
        if self._decoder is None:
            self._decoder = self._loader()
        return self._decoder

    def info(self) -> dict:
        return {"kinds": list(self_attention_kinds()), "max_steps": LIM.MAX_STEPS, "max_prompt_chars": LIM.MAX_PROMPT_CHARS}

    def parse(self, body: dict) -> dict:
        LIM.reject_unknown(body, FIELDS)
        return {
            "prompt": Field("prompt").require_text(body.get("prompt"), LIM.MAX_PROMPT_CHARS),
            "steps": Field("steps").require_int(body.get("steps", 40), 1, LIM.MAX_STEPS),
            "cache": body.get("cache", {"kind": "dynamic"}),
            "temperature": Field("temperature").require_number(body.get("temperature", 0.8), 0.0, 5.0),
            "seed": Field("seed").require_int(body.get("seed", 0), 0, 2**31 - 1),
        }

    @torch.no_grad()
    def run(self, req: dict) -> dict:
        dec = self.decoder  # the first request may train it (seconds): not part of this request's time
        t0 = time.perf_counter()
        caches, kind, kwargs = make_layer_caches(len(dec.model.blocks), req["cache"])
        ids, unknown = dec.encode(req["prompt"])
        g = torch.Generator().manual_seed(req["seed"])
        steps, stopped = [], None
        try:
            logits = dec.model(torch.tensor([ids]), caches=caches)[0, -1]  # (V,) after the prompt
            for i in range(req["steps"]):
                nxt = _pick(logits, req["temperature"], g)
                t = len(ids) + i  # tokens the caches have seen
                steps.append({"token": dec.vocab[nxt], "kept_positions": kept_positions(caches[0], t),
                              "nbytes": int(sum(getattr(c, "nbytes", 0) for c in caches))})
                if time.perf_counter() - t0 > LIM.COMPUTE_SECONDS:
                    stopped = f"stopped after {len(steps)} steps: the {LIM.COMPUTE_SECONDS:g} s time limit of a request"
                    break
                if i + 1 < req["steps"]:
                    logits = dec.model(torch.tensor([[nxt]]), caches=caches)[0, -1]
        except (ValueError, RuntimeError) as e:  # e.g. a static cache that is full: keep the steps so far
            stopped = f"stopped after {len(steps)} steps: {e}"
        return {
            "prompt": req["prompt"], "prompt_tokens": len(ids), "unknown_chars": unknown,
            "cache": {"kind": kind, **kwargs}, "steps": steps, "stopped": stopped,
            "model": {"layers": len(dec.model.blocks), "vocab": len(dec.vocab), **dec.meta},
            "elapsed_ms": round(1000 * (time.perf_counter() - t0), 1),
        }


def _pick(logits: torch.Tensor, temperature: float, g: torch.Generator) -> int:
    """Greedy at temperature 0, else a sample from softmax(logits / temperature)."""
    if temperature == 0:
        return int(logits.argmax())
    return int(torch.multinomial((logits / temperature).softmax(-1), 1, generator=g))
