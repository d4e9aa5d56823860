"""Decoding: greedy with the KV caches equals greedy recomputing the prefix, token for token and
logit for logit (every position choice, pre/post-LN); beam 1 equals greedy; an exhaustive beam
equals brute-force search over every output under the GNMT length penalty; EOS ends a hypothesis
(PAD after it, its score frozen); batching never changes a sentence's result; the cross-attention
cache is filled once; bad arguments raise clear errors."""

from __future__ import annotations

import itertools

import pytest
import torch

from attnkit.data.tokenize import BOS, EOS, PAD
from attnkit.models.decoding import beam_search, greedy_decode, length_penalty
from attnkit.models.seq2seq_rnn import Seq2SeqRNN
from attnkit.models.transformer import Seq2SeqTransformer

V = 16
SRC_LEN = torch.tensor([7, 3, 5, 1])


def _src(seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, V, (4, 7), generator=g)
    return torch.where(torch.arange(7)[None] < SRC_LEN[:, None], src, torch.full_like(src, PAD))


def _transformer(position="sinusoidal", norm_first=True, seed=0, steps=40):
    """A small Transformer trained briefly to copy its source: its outputs vary token to token
    (an untrained one repeats one token, which would make cache equality trivial)."""
    torch.manual_seed(seed)
    m = Seq2SeqTransformer(V, V, d_model=32, nhead=4, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=48, dropout=0.0, position=position, norm_first=norm_first)
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    for _ in range(steps):
        src = torch.randint(4, V, (16, 7), generator=g)
        tgt_in = torch.cat([torch.full((16, 1), BOS), src], 1)
        tgt_out = torch.cat([src, torch.full((16, 1), EOS)], 1)
        loss = torch.nn.functional.cross_entropy(m(src, torch.full((16,), 7), tgt_in).logits.reshape(-1, V), tgt_out.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return m.eval()


@pytest.mark.parametrize("position", ["sinusoidal", "learned", "rotary"])
@pytest.mark.parametrize("norm_first", [True, False])
def test_greedy_with_cache_equals_without_token_for_token(position, norm_first):
    m = _transformer(position, norm_first)
    src = _src()
    fast = greedy_decode(m, src, SRC_LEN, max_len=12, use_cache=True)
    slow = greedy_decode(m, src, SRC_LEN, max_len=12, use_cache=False)
    assert torch.equal(fast.tokens, slow.tokens)
    assert fast.tokens.shape[1] >= 6 and len(set(fast.tokens.flatten().tolist())) > 3  # a real sequence, not one token
    torch.testing.assert_close(fast.scores, slow.scores, rtol=0, atol=1e-4)


def test_cached_step_logits_equal_full_decoder_logits():
    m = _transformer("rotary")
    src = _src()
    tgt = torch.cat([torch.full((4, 1), BOS), torch.randint(4, V, (4, 8))], 1)
    with torch.no_grad():
        full = m(src, SRC_LEN, tgt).logits  # (B, T, V), teacher forcing
        state = m.start(src, SRC_LEN, use_cache=True)
        steps = torch.stack([m.decode_step(state, tgt[:, t]) for t in range(tgt.shape[1])], 1)
    torch.testing.assert_close(steps, full, rtol=0, atol=1e-5)
    assert all(c.initialized for c in state.cross_caches)
    assert int(state.self_caches[0].seq_lengths()[0]) == tgt.shape[1]  # the self-attention cache grew one token a step


def test_cross_attention_keys_are_projected_once():
    m = _transformer()
    calls = []
    for layer in m.decoder_layers:
        layer.multihead_attn.k_proj.register_forward_hook(lambda *a: calls.append(1))
    greedy_decode(m, _src(), SRC_LEN, max_len=6)
    assert len(calls) == len(m.decoder_layers)  # once per layer, not once per step


@pytest.mark.parametrize("kind", ["transformer", "rnn"])
def test_beam_one_is_greedy(kind):
    torch.manual_seed(0)
    m = _transformer() if kind == "transformer" else Seq2SeqRNN(V, V, emb_dim=8, hidden=16, attention="luong").eval()
    g = greedy_decode(m, _src(), SRC_LEN, max_len=10)
    b = beam_search(m, _src(), SRC_LEN, beam_size=1, max_len=10, alpha=1.0)
    assert torch.equal(b.tokens, g.tokens) and torch.equal(b.lengths, g.lengths)


def test_batched_beam_equals_one_sentence_at_a_time():
    m = _transformer()
    src = _src()
    batch = beam_search(m, src, SRC_LEN, beam_size=3, max_len=10)
    for i in range(4):
        one = beam_search(m, src[i : i + 1, : int(SRC_LEN[i])], SRC_LEN[i : i + 1], beam_size=3, max_len=10)
        n = one.tokens.shape[1]
        assert torch.equal(batch.tokens[i, :n], one.tokens[0])
        assert bool((batch.tokens[i, n:] == PAD).all())
        torch.testing.assert_close(batch.scores[i], one.scores[0], rtol=0, atol=1e-4)


class _TableModel:
    """A decoder whose next-token log-probabilities are a fixed random function of the prefix."""

    def __init__(self, vocab=5, seed=0):
        self.vocab, self.seed = vocab, seed

    def logits(self, prefix: tuple[int, ...]) -> torch.Tensor:
        g = torch.Generator().manual_seed(hash((self.seed,) + prefix) % (2**31))
        return torch.randn(self.vocab, generator=g) * 2

    def start(self, src, src_len, *, use_cache=True):
        model = self

        class State:
            prefixes = [()] * src.shape[0]

            def reorder(self, idx):
                self.prefixes = [self.prefixes[i] for i in idx.tolist()]

        model._state = State()
        return model._state

    def decode_step(self, state, tokens):
        state.prefixes = [p + (int(t),) for p, t in zip(state.prefixes, tokens.reshape(-1))]
        return torch.stack([self.logits(p) for p in state.prefixes])


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_exhaustive_beam_equals_brute_force(alpha):
    """With K ≥ every possible prefix, beam search cannot prune: it must find the best output."""
    vocab, max_len = 5, 3
    m = _TableModel(vocab)
    best, best_rank = None, -float("inf")
    outputs = {seq[: seq.index(EOS) + 1] if EOS in seq else seq for seq in itertools.product(range(vocab), repeat=max_len)}
    for seq in sorted(outputs):  # every distinct output: cut at its first EOS
        score, prefix = 0.0, (BOS,)
        for tok in seq:
            score += torch.log_softmax(m.logits(prefix), -1)[tok].item()
            prefix += (tok,)
        rank = score / length_penalty(torch.tensor(len(seq)), alpha).item()
        if rank > best_rank + 1e-9:
            best, best_rank = seq, rank
    src = torch.zeros(1, 1, dtype=torch.long)
    out = beam_search(m, src, torch.tensor([1]), beam_size=vocab**max_len, max_len=max_len, alpha=alpha)
    n = int(out.lengths[0])
    got = tuple(out.tokens[0, : n + 1].tolist())  # the tokens before EOS, and EOS if there is one
    assert got == best, (got, best)


def test_eos_freezes_a_hypothesis_and_pads_after_it():
    m = _transformer()
    out = beam_search(m, _src(), SRC_LEN, beam_size=4, max_len=15)
    for row, n in zip(out.tokens, out.lengths):
        if int(n) < out.tokens.shape[1]:
            assert int(row[n]) == EOS and bool((row[n + 1 :] == PAD).all()) and EOS not in row[:n].tolist()


def test_bad_arguments_get_clear_errors():
    m = _transformer()
    with pytest.raises(ValueError, match="beam_size must be a positive int"):
        beam_search(m, _src(), SRC_LEN, beam_size=0)
    with pytest.raises(ValueError, match="alpha"):
        beam_search(m, _src(), SRC_LEN, alpha=-1.0)
    with pytest.raises(ValueError, match="max_len must be a positive int"):
        greedy_decode(m, _src(), SRC_LEN, max_len=0)
    with pytest.raises(ValueError, match="src must be a"):
        greedy_decode(m, _src()[0], SRC_LEN)
