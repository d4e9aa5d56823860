"""Greedy and batched beam-search decoding for the seq2seq models.

Any model with two methods decodes here (both :class:`~attnkit.models.seq2seq_rnn.Seq2SeqRNN`
and :class:`~attnkit.models.transformer.Seq2SeqTransformer` have them):

* ``start(src, src_len, use_cache=...) -> state`` encodes once; ``state.reorder(indices)`` makes
  row i the old row ``indices[i]`` (what beam search needs; the Transformer's KV caches reorder
  with it, the cross-attention cache keeps its encoder keys computed once);
* ``decode_step(state, tokens (B,)) -> logits (B, V)`` feeds the previous token and advances.

Greedy picks ``argmax`` each step. Beam search (Sutskever et al. 2014, https://arxiv.org/abs/1409.3215;
batched as in fairseq) keeps K hypotheses per sentence in one (B·K)-row batch. Each step every
live hypothesis proposes V continuations; candidates are ranked by

    score / lp(length),  lp(n) = ((5 + n) / 6)^α      (GNMT, Wu et al. 2016, https://arxiv.org/abs/1609.08144)

and the best K survive. A hypothesis that emitted EOS is finished: its only continuation is PAD
at zero cost, so it keeps its score and length and competes unchanged with the live ones. The
search stops when every hypothesis is finished or at ``max_len``. With K = 1 the ranking is an
argmax of the next-token log-probability, so beam 1 is greedy (a test checks token for token).

Outputs are right-padded with PAD after each sequence's EOS; ``lengths`` counts tokens before EOS.

Shape legend: B sentences, K beam size, V vocabulary, T output length.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..core.checks import require_positive_int
from ..data.tokenize import BOS, EOS, PAD


class Decoded(NamedTuple):
    tokens: torch.Tensor  # (B, T) ids, EOS then PAD after each sequence's end
    lengths: torch.Tensor  # (B,) tokens before EOS
    scores: torch.Tensor  # (B,) summed log-probability of the chosen output (EOS included)


def _check(src, src_len, max_len):
    require_positive_int("max_len", max_len)
    if not isinstance(src, torch.Tensor) or src.dim() != 2:
        raise ValueError(f"src must be a (B, S) tensor of token ids, got {tuple(getattr(src, 'shape', ())) or type(src).__name__}")


@torch.no_grad()
def greedy_decode(
    model, src: torch.Tensor, src_len: torch.Tensor, *, max_len: int = 64, use_cache: bool = True,
    bos_id: int = BOS, eos_id: int = EOS, pad_id: int = PAD,
) -> Decoded:
    """Argmax decoding of a batch; every row stops at its own EOS (later steps only feed PAD)."""
    _check(src, src_len, max_len)
    state = model.start(src, src_len, use_cache=use_cache)
    B = src.shape[0]
    prev = torch.full((B,), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    lengths = torch.zeros(B, dtype=torch.long, device=src.device)
    scores = torch.zeros(B, device=src.device)
    out = []
    for _ in range(max_len):
        logp = torch.log_softmax(model.decode_step(state, prev).float(), -1)  # (B, V)
        nxt = logp.argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
        scores = scores + torch.where(done, torch.zeros_like(scores), logp.gather(1, nxt[:, None])[:, 0])
        lengths = lengths + (~done & (nxt != eos_id)).long()
        done = done | (nxt == eos_id)
        out.append(nxt)
        prev = nxt
        if bool(done.all()):
            break
    return Decoded(torch.stack(out, 1), lengths, scores)


def length_penalty(n: torch.Tensor, alpha: float) -> torch.Tensor:
    """GNMT's ((5 + n) / 6)^α; α = 0 ranks by raw log-probability."""
    return ((5.0 + n.float()) / 6.0) ** alpha


@torch.no_grad()
def beam_search(
    model, src: torch.Tensor, src_len: torch.Tensor, *, beam_size: int = 4, max_len: int = 64, alpha: float = 0.6,
    use_cache: bool = True, bos_id: int = BOS, eos_id: int = EOS, pad_id: int = PAD,
) -> Decoded:
    """Batched beam search with GNMT length penalty ``alpha``; returns the best hypothesis per row."""
    _check(src, src_len, max_len)
    K = require_positive_int("beam_size", beam_size)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha < 0:
        raise ValueError(f"alpha (length penalty exponent) must be a float >= 0, got {alpha!r}; 0.6 is GNMT's, 0 disables it")
    dev = src.device
    B = src.shape[0]
    state = model.start(src, src_len, use_cache=use_cache)
    state.reorder(torch.arange(B, device=dev).repeat_interleave(K))  # (B·K) rows: K copies per sentence
    scores = torch.zeros(B, K, device=dev)
    scores[:, 1:] = float("-inf")  # all beams start identical: keep one, or the top-K would be K copies
    finished = torch.zeros(B, K, dtype=torch.bool, device=dev)
    gen_len = torch.zeros(B, K, dtype=torch.long, device=dev)  # tokens generated, EOS included
    hist = torch.empty(B * K, 0, dtype=torch.long, device=dev)
    prev = torch.full((B * K,), bos_id, dtype=torch.long, device=dev)
    for _ in range(max_len):
        logp = torch.log_softmax(model.decode_step(state, prev).float(), -1)  # (B·K, V)
        V = logp.shape[-1]
        logp = logp.view(B, K, V)
        # a finished hypothesis continues with PAD at zero cost, and with nothing else
        frozen = torch.full((V,), float("-inf"), device=dev)
        frozen[pad_id] = 0.0
        logp = torch.where(finished[..., None], frozen, logp)
        cand = scores[..., None] + logp  # (B, K, V)
        new_len = gen_len[..., None] + (~finished[..., None]).long()  # (B, K, 1): length once extended
        rank = (cand / length_penalty(new_len, alpha)).view(B, K * V)
        _, idx = rank.topk(K, dim=1)  # (B, K)
        beam, tok = idx // V, idx % V
        rows = (torch.arange(B, device=dev)[:, None] * K + beam).view(-1)  # old row of each survivor
        state.reorder(rows)
        scores = cand.view(B, K * V).gather(1, idx)
        was_finished = finished.gather(1, beam)
        gen_len = gen_len.gather(1, beam) + (~was_finished).long()
        finished = was_finished | (tok == eos_id)
        hist = torch.cat([hist.index_select(0, rows), tok.view(-1, 1)], 1)
        prev = tok.view(-1)
        if bool(finished.all()):
            break
    final = scores / length_penalty(gen_len, alpha)  # the same ranking as during the search
    best = final.argmax(1)  # (B,)
    pick = torch.arange(B, device=dev) * K + best
    tokens = hist.index_select(0, pick)
    lengths = (gen_len - finished.long()).gather(1, best[:, None])[:, 0]
    return Decoded(tokens, lengths, scores.gather(1, best[:, None])[:, 0])
