"""A tiny decoder-only language model to generate with: embedding, N pre-norm blocks, LM head.

Radford et al. 2019 (GPT-2), https://cdn.openai.com/better-language-models/language_models_are_unsupervised_multitask_learners.pdf:
``x = x + attn(ln1(x)); x = x + mlp(ln2(x))``, causal self-attention, a final LayerNorm and a
linear head. Positions come from one of

* ``"rope"`` — rotary q/k (Su et al. 2021, https://arxiv.org/abs/2104.09864);
* ``"alibi"`` — linear distance bias (Press et al. 2022, https://arxiv.org/abs/2108.12409);
* ``"t5"`` — learned bucketed relative bias shared by all layers (Raffel et al. 2020,
  https://arxiv.org/abs/1910.10683), causal buckets;
* ``"shaw"`` — learned scalar per clipped distance (Shaw et al. 2018, https://arxiv.org/abs/1803.02155);
* ``"none"``.

It exists to show that incremental decoding with a cache is the *same function* as full causal
attention over the whole sequence: ``forward(tokens)`` (no cache) and a prompt followed by one
token at a time through :mod:`attnkit.cache` give the same logits. ``window`` adds a sliding-window
mask (the last ``window`` tokens), which a :class:`~attnkit.cache.SlidingWindowCache` of that
window reproduces with bounded memory.

Shape legend: tokens (B, L) int; logits (B, L, V); D model width.
"""

from __future__ import annotations

import torch
from torch import nn

from ..core import masks as M
from ..core.biases import ALiBi, RelativePositionBias, T5RelativeBias
from ..core.checks import require_choice, require_positive_int
from ..modules import cache as C
from ..modules.multihead import MultiHeadAttention
from ..modules.rotary import RotaryEmbedding

POSITIONS = ("rope", "alibi", "t5", "shaw", "none")


class Block(nn.Module):
    def __init__(self, dim: int, num_heads: int, kv_heads: int | None, mlp_ratio: int, rotary, backend: str, **kw):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim, **kw)
        self.attn = MultiHeadAttention(dim, num_heads, kv_heads=kv_heads, rotary=rotary, backend=backend, **kw)
        self.ln2 = nn.LayerNorm(dim, **kw)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim, **kw), nn.GELU(), nn.Linear(mlp_ratio * dim, dim, **kw))

    def forward(self, x, *, cache=None, mask=None, bias=None, attention_mask=None):
        a, _ = self.attn(self.ln1(x), causal=True, cache=cache, mask=mask, bias=bias, attention_mask=attention_mask)
        x = x + a
        return x + self.mlp(self.ln2(x))


class ToyDecoder(nn.Module):
    """Decoder-only LM. ``forward(tokens, caches=...)`` → logits; ``generate`` decodes greedily."""

    def __init__(
        self,
        vocab_size: int = 64,
        dim: int = 64,
        num_heads: int = 4,
        *,
        kv_heads: int | None = None,
        num_layers: int = 2,
        position: str = "rope",
        window: int | None = None,
        max_positions: int = 4096,
        mlp_ratio: int = 4,
        backend: str = "auto",
        device=None,
        dtype=None,
    ):
        super().__init__()
        require_positive_int("vocab_size", vocab_size)
        require_positive_int("num_layers", num_layers)
        self.position = require_choice("position", position, POSITIONS)
        self.window = None if window is None else require_positive_int("window", window)
        kw = {"device": device, "dtype": dtype}
        self.vocab_size, self.dim, self.num_layers = vocab_size, dim, num_layers
        self.embed = nn.Embedding(vocab_size, dim, **kw)
        rotary = RotaryEmbedding(dim // num_heads, max_positions=max_positions, device=device) if position == "rope" else None
        if position == "alibi":
            self.pos_bias = ALiBi(num_heads)
        elif position == "t5":
            self.pos_bias = T5RelativeBias(num_heads, bidirectional=False, num_buckets=16, max_distance=64, **kw)
        elif position == "shaw":
            self.pos_bias = RelativePositionBias(num_heads, max_distance=8, **kw)
        else:
            self.pos_bias = None
        self.blocks = nn.ModuleList(Block(dim, num_heads, kv_heads, mlp_ratio, rotary, backend, **kw) for _ in range(num_layers))
        self.ln_f = nn.LayerNorm(dim, **kw)
        self.head = nn.Linear(dim, vocab_size, bias=False, **kw)

    def make_caches(self, kind: str = "dynamic", **kwargs) -> list:
        """One cache per layer: ``make_caches("static", max_len=1024)``, ``make_caches("sliding", window=w)``."""
        if kind == "cross":
            raise ValueError("a decoder-only model has no cross-attention; use kind='dynamic', 'static' or 'sliding'")
        if kind == "sliding":
            kwargs.setdefault("window", self.window)
            if kwargs["window"] is None:
                raise ValueError("a sliding cache needs window=; pass it or build the model with window=")
            if self.window is not None and kwargs["window"] < self.window:
                raise ValueError(f"the sliding cache window {kwargs['window']} is smaller than the model's window {self.window}; it would drop keys the model attends")
        return [C.make_cache(kind, **kwargs) for _ in self.blocks]

    def forward(self, tokens: torch.Tensor, *, caches: list | None = None, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """tokens (B, L) → logits (B, L, V). With ``caches`` (one per layer) the tokens continue what
        the caches hold; ``attention_mask`` (B, L), 1 = token, marks padding of these new tokens.
        Without caches a padded batch runs through fresh dynamic caches (positions per sequence)."""
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.is_floating_point():
            raise ValueError(f"tokens must be an integer (B, L) tensor, got {getattr(tokens, 'dtype', type(tokens).__name__)} {tuple(getattr(tokens, 'shape', ()))}")
        if caches is None and attention_mask is not None and not bool(attention_mask.bool().all()):
            caches = self.make_caches("dynamic")
        if caches is not None and len(caches) != len(self.blocks):
            raise ValueError(f"caches must hold one cache per layer ({len(self.blocks)}), got {len(caches)}; build them with make_caches()")
        x = self.embed(tokens)  # (B, L, D)
        mask = M.sliding_window(left=self.window - 1) if self.window is not None else None
        for i, blk in enumerate(self.blocks):
            x = blk(x, cache=None if caches is None else caches[i], mask=mask, bias=self.pos_bias, attention_mask=attention_mask)
        return self.head(self.ln_f(x))

    @torch.no_grad()
    def generate(
        self,
        prompt: torch.Tensor,
        max_new_tokens: int,
        *,
        cache: str | list | None = "dynamic",
        attention_mask: torch.Tensor | None = None,
        **cache_kwargs,
    ) -> torch.Tensor:
        """Greedy decoding → (B, max_new_tokens) new tokens.

        ``cache``: a kind (``"dynamic"``, ``"static"``, ``"sliding"``), a list of caches, or None to
        recompute the whole prefix every step (the slow baseline). ``attention_mask`` (B, L_prompt)
        marks left/right padding of the prompt.
        """
        require_positive_int("max_new_tokens", max_new_tokens)
        if cache is None:
            return self._generate_recompute(prompt, max_new_tokens, attention_mask)
        caches = self.make_caches(cache, **cache_kwargs) if isinstance(cache, str) else cache
        logits = self(prompt, caches=caches, attention_mask=attention_mask)
        last = _last_real(logits, attention_mask)
        out = []
        for _ in range(max_new_tokens):
            nxt = last.argmax(-1, keepdim=True)  # (B, 1)
            out.append(nxt)
            if len(out) == max_new_tokens:
                break
            last = self(nxt, caches=caches)[:, -1]
        return torch.cat(out, 1)

    def _generate_recompute(self, prompt, n, attention_mask):
        if attention_mask is not None and not bool(attention_mask.bool().all()):
            raise ValueError("recompute generation supports unpadded prompts only; pass one sequence at a time or use a cache")
        seq, out = prompt, []
        for _ in range(n):
            nxt = self(seq)[:, -1].argmax(-1, keepdim=True)
            out.append(nxt)
            seq = torch.cat([seq, nxt], 1)
        return torch.cat(out, 1)


def _last_real(logits: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Logits (B, V) of each row's last real token (right padding puts it before the end)."""
    if attention_mask is None:
        return logits[:, -1]
    am = attention_mask.bool()
    idx = torch.where(am, torch.arange(am.shape[1], device=am.device)[None], torch.full_like(am, -1, dtype=torch.long)).amax(1)
    return logits[torch.arange(logits.shape[0], device=logits.device), idx.clamp(min=0)]
