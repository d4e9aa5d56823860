"""The Transformer encoder-decoder, assembled from attnkit parts.

Vaswani et al. 2017, "Attention Is All You Need", https://arxiv.org/abs/1706.03762: token
embeddings scaled by √D plus positions, a stack of :class:`~attnkit.modules.transformer_layers.TransformerEncoderLayer`
over the source (padding masked), a stack of causal :class:`~attnkit.modules.transformer_layers.TransformerDecoderLayer`
over the shifted target with cross-attention to the encoder output, and a linear map to the
target vocabulary. Choices, each an argument:

* ``position``: ``"sinusoidal"`` (the paper), ``"learned"``, or ``"rotary"`` (RoPE inside every
  self-attention, Su et al. 2021, https://arxiv.org/abs/2104.09864; nothing added to embeddings);
* ``norm_first``: pre-LN (then a final LayerNorm closes each stack, as in ``torch.nn.Transformer``)
  or post-LN;
* ``tie_embeddings``: ``"none"``, ``"decoder"`` (target embedding = output projection, Press &
  Wolf 2017, https://arxiv.org/abs/1608.05859) or ``"all"`` (also the source embedding — the
  paper's three-way sharing; needs one shared vocabulary).

Embeddings start N(0, D^-½) and are multiplied by √D, so their entries have unit scale, as do the
sinusoids added to them; tied output logits then start small.

Decoding goes through :meth:`start` / :meth:`decode_step` (used by :mod:`attnkit.models.decoding`):
with ``use_cache=True`` each decoder layer keeps a :class:`~attnkit.cache.DynamicCache` for its
self-attention (one new token per step) and a :class:`~attnkit.cache.CrossAttentionCache` filled
on the first step; with ``use_cache=False`` every step reruns the decoder on the whole prefix (the
baseline the cache must equal token for token).

Shape legend: B batch, S source length, T target length, D d_model, V vocabulary.
src (B, S) ids, src_len (B,), tgt_in (B, T) ids starting with BOS; logits (B, T, V).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ..core.checks import require_choice, require_positive_int, require_probability
from ..data.tokenize import PAD
from ..modules import cache as C
from ..modules.positional import make_positional_encoding
from ..modules.rotary import RotaryEmbedding
from ..modules.transformer_layers import TransformerDecoderLayer, TransformerEncoderLayer
from .seq2seq_rnn import Seq2SeqOutput, _check_src

TIES = ("none", "decoder", "all")


@dataclass
class TransformerDecoderState:
    memory: torch.Tensor  # (B, S, D)
    valid: torch.Tensor  # (B, S) bool
    prefix: torch.Tensor  # (B, t) tokens fed so far
    self_caches: list | None
    cross_caches: list | None

    def reorder(self, idx: torch.Tensor) -> None:
        self.memory, self.valid, self.prefix = self.memory.index_select(0, idx), self.valid.index_select(0, idx), self.prefix.index_select(0, idx)
        for cache in (self.self_caches or []) + (self.cross_caches or []):
            if cache.initialized:  # an empty cache has no rows yet; it fills at the reordered size
                cache.reorder(idx)


class Seq2SeqTransformer(nn.Module):
    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        *,
        d_model: int = 128,
        nhead: int = 4,
        num_encoder_layers: int = 2,
        num_decoder_layers: int = 2,
        dim_feedforward: int = 512,
        dropout: float = 0.1,
        activation: str = "relu",
        norm_first: bool = True,
        position: str = "sinusoidal",
        max_len: int = 1024,
        tie_embeddings: str = "none",
        pad_id: int = PAD,
        backend: str = "auto",
    ):
        super().__init__()
        for name, v in (("src_vocab", src_vocab), ("tgt_vocab", tgt_vocab), ("d_model", d_model), ("num_encoder_layers", num_encoder_layers), ("num_decoder_layers", num_decoder_layers)):
            require_positive_int(name, v)
        self.tie = require_choice("tie_embeddings", tie_embeddings, TIES)
        if self.tie == "all" and src_vocab != tgt_vocab:
            raise ValueError(f"tie_embeddings='all' shares one embedding, so src_vocab must equal tgt_vocab, got {src_vocab} and {tgt_vocab}; use 'decoder'")
        self.position = require_choice("position", position, ("sinusoidal", "learned", "rotary"))
        self.d_model, self.pad_id, self.norm_first = d_model, pad_id, bool(norm_first)
        self.src_embed = nn.Embedding(src_vocab, d_model, padding_idx=pad_id)
        self.tgt_embed = self.src_embed if self.tie == "all" else nn.Embedding(tgt_vocab, d_model, padding_idx=pad_id)
        for emb in {id(e): e for e in (self.src_embed, self.tgt_embed)}.values():
            nn.init.normal_(emb.weight, std=d_model**-0.5)
            with torch.no_grad():
                emb.weight[pad_id].zero_()
        self.pos = make_positional_encoding(position, d_model, max_len)
        rotary = RotaryEmbedding(d_model // nhead, max_positions=max_len) if position == "rotary" else None
        kw = dict(dim_feedforward=dim_feedforward, dropout=dropout, activation=activation, norm_first=norm_first, rotary=rotary, backend=backend)
        self.encoder_layers = nn.ModuleList(TransformerEncoderLayer(d_model, nhead, **kw) for _ in range(num_encoder_layers))
        self.decoder_layers = nn.ModuleList(TransformerDecoderLayer(d_model, nhead, **kw) for _ in range(num_decoder_layers))
        self.encoder_norm = nn.LayerNorm(d_model) if norm_first else None
        self.decoder_norm = nn.LayerNorm(d_model) if norm_first else None
        self.out = nn.Linear(d_model, tgt_vocab, bias=False)
        if self.tie != "none":
            self.out.weight = self.tgt_embed.weight
        self.drop = nn.Dropout(require_probability("dropout", dropout))

    def _embed(self, emb: nn.Embedding, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x = emb(tokens) * math.sqrt(self.d_model)  # (B, L, D)
        if self.pos is not None:
            x = x + self.pos(positions).to(x.dtype)
        return self.drop(x)

    def encode(self, src: torch.Tensor, src_len: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """memory (B, S, D) and its validity (B, S)."""
        _check_src(src, src_len)
        S = src.shape[1]
        valid = torch.arange(S, device=src.device)[None, :] < src_len[:, None]
        x = self._embed(self.src_embed, src, torch.arange(S, device=src.device))
        for layer in self.encoder_layers:
            x = layer(x, valid=valid)
        return (self.encoder_norm(x) if self.encoder_norm is not None else x), valid

    def decode(
        self, tgt: torch.Tensor, memory: torch.Tensor, valid: torch.Tensor, *, start: int = 0,
        self_caches=None, cross_caches=None, need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """tgt (B, L) at positions ``start..start+L-1`` → logits (B, L, V), last layer's cross weights (B, L, S)."""
        L = tgt.shape[1]
        x = self._embed(self.tgt_embed, tgt, torch.arange(start, start + L, device=tgt.device))
        w = None
        for i, layer in enumerate(self.decoder_layers):
            last = i == len(self.decoder_layers) - 1
            x, w_i = layer(
                x, memory, memory_valid=valid,
                self_cache=None if self_caches is None else self_caches[i],
                cross_cache=None if cross_caches is None else cross_caches[i],
                need_weights=need_weights and last,
            )
            w = w_i if last else w
        x = self.decoder_norm(x) if self.decoder_norm is not None else x
        return self.out(x), w

    def forward(self, src: torch.Tensor, src_len: torch.Tensor, tgt_in: torch.Tensor, *, need_weights: bool = False) -> Seq2SeqOutput:
        """Teacher forcing: logits (B, T, V); alignments (B, T, S) of the last layer's cross-attention
        (mean over heads) when ``need_weights``."""
        if not isinstance(tgt_in, torch.Tensor) or tgt_in.dim() != 2 or tgt_in.is_floating_point():
            raise ValueError(f"tgt_in must be an integer (B, T) tensor starting with BOS, got {getattr(tgt_in, 'dtype', type(tgt_in).__name__)} {tuple(getattr(tgt_in, 'shape', ()))}")
        memory, valid = self.encode(src, src_len)
        logits, w = self.decode(tgt_in, memory, valid, need_weights=need_weights)
        return Seq2SeqOutput(logits, w)

    # incremental decoding -------------------------------------------------------------------------
    def start(self, src: torch.Tensor, src_len: torch.Tensor, *, use_cache: bool = True) -> TransformerDecoderState:
        memory, valid = self.encode(src, src_len)
        n = len(self.decoder_layers)
        selfc = [C.DynamicCache() for _ in range(n)] if use_cache else None
        cross = [C.CrossAttentionCache() for _ in range(n)] if use_cache else None
        return TransformerDecoderState(memory, valid, src.new_zeros(src.shape[0], 0), selfc, cross)

    def decode_step(self, state: TransformerDecoderState, tokens: torch.Tensor) -> torch.Tensor:
        """Previous tokens (B,) or (B, 1) → next-token logits (B, V); ``state`` moves one step on."""
        tokens = tokens.reshape(-1, 1)
        t = state.prefix.shape[1]
        state.prefix = torch.cat([state.prefix, tokens], 1)
        if state.self_caches is None:  # recompute the whole prefix: the slow reference path
            logits, _ = self.decode(state.prefix, state.memory, state.valid)
        else:
            logits, _ = self.decode(tokens, state.memory, state.valid, start=t, self_caches=state.self_caches, cross_caches=state.cross_caches)
        return logits[:, -1]
