"""Recurrent encoder-decoder with three attention choices sharing one decoder loop.

* ``attention="none"`` — the fixed-vector model (Cho et al. 2014, https://arxiv.org/abs/1406.1078;
  Sutskever et al. 2014, https://arxiv.org/abs/1409.3215): the whole source is squeezed into
  ``c = tanh(W_b h_final)``, which initialises the decoder and is its context at every step.
  This is the bottleneck Bahdanau et al. blamed for the fall of RNNencdec's BLEU with length.
* ``"bahdanau"`` — Bahdanau et al. 2015, https://arxiv.org/abs/1409.0473: the previous state
  ``s_{t-1}`` queries an additive score over every encoder state; the context ``c_t`` feeds the
  recurrence ``s_t = f(s_{t-1}, [y_{t-1}; c_t])``.
* ``"luong"`` — Luong et al. 2015, https://arxiv.org/abs/1508.04025: the recurrence runs first,
  the new state ``h_t`` queries a general (bilinear) score, and ``h̃_t = tanh(W_c [h_t; c_t])``
  is both the output and the next step's extra input ("input feeding", §3.3).

One loop (:meth:`Seq2SeqRNN.decode_step`) serves all three: the context entering the recurrence
is the fixed c, the attention over ``s_{t-1}``, or the previous ``h̃``; the context read out is c
or the attention over the state. The read-out is ``h̃_t = tanh(W_c [s_t; ctx_t])``, logits ``W_o
h̃_t`` for every variant, so the variants differ only in where (and whether) they attend and
their parameter counts differ only by the score's weights (a simplification of Bahdanau's
maxout read-out, kept identical across variants so the comparison isolates attention).

The encoder is a GRU or LSTM, optionally bidirectional; its states are packed by source length,
so padding never enters a final state. A bidirectional encoder's 2·H states are projected to H
once (``memory_proj``) for attention. Alignments come back as (B, T_out, T_in); rows sum to 1
over real source tokens and are exactly 0 on padding.

Shape legend: B batch, S source length, T target length, E embedding width, H hidden width,
V vocabulary. src (B, S) ids, src_len (B,), tgt_in (B, T) ids starting with BOS.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from ..core.checks import require_choice, require_positive_int, require_probability
from ..data.tokenize import PAD
from ..modules.seq2seq_attention import make_seq2seq_attention

CELLS = {"gru": (nn.GRU, nn.GRUCell), "lstm": (nn.LSTM, nn.LSTMCell)}


class Seq2SeqOutput(NamedTuple):
    logits: torch.Tensor  # (B, T, V)
    alignments: torch.Tensor | None  # (B, T, S), None for models without attention


class RNNEncoder(nn.Module):
    """Embedding + GRU/LSTM over packed sequences → memory (B, S, D_enc), final (B, D_enc)."""

    def __init__(self, vocab_size: int, emb_dim: int, hidden: int, *, cell: str = "gru", bidirectional: bool = True, pad_id: int = PAD):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, emb_dim, padding_idx=pad_id)
        self.rnn = CELLS[cell][0](emb_dim, hidden, batch_first=True, bidirectional=bidirectional)
        self.out_dim = hidden * (2 if bidirectional else 1)

    def forward(self, src: torch.Tensor, src_len: torch.Tensor, dropout: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        x = dropout(self.embed(src))  # (B, S, E)
        packed = nn.utils.rnn.pack_padded_sequence(x, src_len.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False)
        out, h = self.rnn(packed)
        h = h[0] if isinstance(h, tuple) else h  # LSTM: (h_n, c_n); the summary is h_n
        memory, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])  # (B, S, D_enc)
        final = torch.cat(list(h[-2:]), -1) if self.rnn.bidirectional else h[-1]  # (B, D_enc): forward end ‖ backward start
        return memory, final


@dataclass
class RNNDecoderState:
    """Everything one decoder step needs; :meth:`reorder` serves beam search."""

    h: torch.Tensor  # (B, H)
    c: torch.Tensor | None  # (B, H) LSTM cell, None for GRU
    feed: torch.Tensor  # (B, H): fixed c (none), h̃_{t-1} (luong), unused zeros (bahdanau)
    memory: torch.Tensor | None  # (B, S, H)
    valid: torch.Tensor  # (B, S) bool
    weights: torch.Tensor | None = None  # (B, S) alignment of the last step
    keys: torch.Tensor | None = None  # (B, S, A): the attention's prepare(memory), computed once; None when that is the memory

    def reorder(self, idx: torch.Tensor) -> None:
        for name in ("h", "c", "feed", "memory", "valid", "weights", "keys"):
            t = getattr(self, name)
            if t is not None:
                setattr(self, name, t.index_select(0, idx))


class Seq2SeqRNN(nn.Module):
    """``forward(src, src_len, tgt_in)`` → :class:`Seq2SeqOutput`; decoding via :mod:`attnkit.models.decoding`."""

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        *,
        emb_dim: int = 64,
        hidden: int = 128,
        cell: str = "gru",
        bidirectional: bool = True,
        attention: str = "bahdanau",
        attn_dim: int | None = None,
        dropout: float = 0.0,
        pad_id: int = PAD,
    ):
        super().__init__()
        for name, v in (("src_vocab", src_vocab), ("tgt_vocab", tgt_vocab), ("emb_dim", emb_dim), ("hidden", hidden)):
            require_positive_int(name, v)
        self.cell_kind = require_choice("cell", cell, tuple(CELLS))
        self.attention_kind = require_choice("attention", attention, ("none", "bahdanau", "luong"))
        self.hidden, self.pad_id = hidden, pad_id
        self.encoder = RNNEncoder(src_vocab, emb_dim, hidden, cell=cell, bidirectional=bidirectional, pad_id=pad_id)
        d_enc = self.encoder.out_dim
        self.bridge = nn.Linear(d_enc, hidden)  # s_0 = tanh(W_b h_final): also the fixed context of "none"
        self.attention = make_seq2seq_attention(attention, hidden, **({"attn_dim": attn_dim} if attention == "bahdanau" and attn_dim else {}))
        self.memory_proj = nn.Linear(d_enc, hidden, bias=False) if self.attention is not None and d_enc != hidden else None
        self.tgt_embed = nn.Embedding(tgt_vocab, emb_dim, padding_idx=pad_id)
        self.cell = CELLS[cell][1](emb_dim + hidden, hidden)
        self.combine = nn.Linear(2 * hidden, hidden)  # h̃ = tanh(W_c [s; ctx])
        self.out = nn.Linear(hidden, tgt_vocab)
        self.drop = nn.Dropout(require_probability("dropout", dropout))

    # encoder side ------------------------------------------------------------------------------
    def start(self, src: torch.Tensor, src_len: torch.Tensor, *, use_cache: bool = True) -> RNNDecoderState:
        """Encode and build the decoder's initial state (``use_cache`` is moot: the state is the cache)."""
        _check_src(src, src_len)
        memory, final = self.encoder(src, src_len, self.drop)
        s0 = torch.tanh(self.bridge(final))  # (B, H)
        valid = torch.arange(src.shape[1], device=src.device)[None, :] < src_len[:, None]  # (B, S)
        if self.attention is None:
            memory, feed = None, s0
        else:
            memory = self.memory_proj(memory) if self.memory_proj is not None else memory
            feed = torch.zeros_like(s0)
        c0 = torch.zeros_like(s0) if self.cell_kind == "lstm" else None
        keys = self.attention.prepare(memory) if self.attention is not None else None
        keys = None if keys is memory else keys  # nothing prepared (Luong): beam search then reorders the memory once, not twice
        return RNNDecoderState(s0, c0, feed, memory, valid, keys=keys)

    # the one decoder loop ----------------------------------------------------------------------
    def decode_step(self, state: RNNDecoderState, tokens: torch.Tensor) -> torch.Tensor:
        """One step: previous tokens (B,) or (B, 1) → logits (B, V); ``state`` moves one step on."""
        return self.out(self.drop(self._advance(state, tokens)))  # (B, V)

    def _advance(self, state: RNNDecoderState, tokens: torch.Tensor) -> torch.Tensor:
        """The recurrence and attention of one step → attentional state h̃_t (B, H)."""
        e = self.drop(self.tgt_embed(tokens.reshape(-1)))  # (B, E)
        attn = self.attention
        before = attn is not None and attn.queries_before_recurrence
        w = None
        if before:
            ctx_in, w = attn(state.h, state.memory, state.valid, state.keys)  # Bahdanau: query s_{t-1}
        else:
            ctx_in = state.feed  # fixed c, or Luong's input feeding of h̃_{t-1}
        x = torch.cat([e, ctx_in], -1)  # (B, E + H)
        if state.c is None:
            state.h = self.cell(x, state.h)
        else:
            state.h, state.c = self.cell(x, (state.h, state.c))
        if attn is None:
            ctx = state.feed
        elif before:
            ctx = ctx_in
        else:
            ctx, w = attn(state.h, state.memory, state.valid, state.keys)  # Luong: query h_t
        h_tilde = torch.tanh(self.combine(torch.cat([state.h, ctx], -1)))  # (B, H)
        if attn is not None and not before:
            state.feed = h_tilde
        state.weights = w
        return h_tilde

    def forward(self, src: torch.Tensor, src_len: torch.Tensor, tgt_in: torch.Tensor) -> Seq2SeqOutput:
        """Teacher forcing: logits (B, T, V) for ``tgt_in`` (BOS + target), alignments (B, T, S)."""
        if not isinstance(tgt_in, torch.Tensor) or tgt_in.dim() != 2 or tgt_in.is_floating_point():
            raise ValueError(f"tgt_in must be an integer (B, T) tensor starting with BOS, got {getattr(tgt_in, 'dtype', type(tgt_in).__name__)} {tuple(getattr(tgt_in, 'shape', ()))}")
        state = self.start(src, src_len)
        hidden, align = [], []
        for t in range(tgt_in.shape[1]):
            hidden.append(self._advance(state, tgt_in[:, t]))
            if state.weights is not None:
                align.append(state.weights)
        # One (B·T, H) × (H, V) product after the loop instead of T small ones: the vocabulary
        # projection is most of the step's work and does not feed the recurrence (2,000-token
        # vocabularies: ~25 % of a training step on one core).
        logits = self.out(self.drop(torch.stack(hidden, 1)))  # (B, T, V)
        return Seq2SeqOutput(logits, torch.stack(align, 1) if align else None)


def _check_src(src, src_len) -> None:
    if not isinstance(src, torch.Tensor) or src.dim() != 2 or src.is_floating_point():
        raise ValueError(f"src must be an integer (B, S) tensor of token ids, got {getattr(src, 'dtype', type(src).__name__)} {tuple(getattr(src, 'shape', ()))}")
    if not isinstance(src_len, torch.Tensor) or src_len.shape != (src.shape[0],):
        raise ValueError(f"src_len must be a (B,)=({src.shape[0]},) tensor of source lengths, got {tuple(getattr(src_len, 'shape', ())) or type(src_len).__name__}")
    if src.shape[1] == 0 or bool((src_len < 1).any()) or bool((src_len > src.shape[1]).any()):
        raise ValueError(f"src_len must lie in [1, S={src.shape[1]}], got {src_len.tolist()}; every source needs at least one token")
