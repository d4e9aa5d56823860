"""The recurrent seq2seq models: each attention choice overfits one small batch to near-zero loss,
alignments are (B, T_out, T_in) with rows summing to 1 over real source tokens and exactly 0 on
padding, decoder outputs up to t never depend on target tokens after t, padding never changes
an output, parameter counts equal the formulas written from the layer definitions, beam 1 is
greedy, and bad inputs get one clear error each."""

from __future__ import annotations

import pytest
import torch

from attnkit.data.tokenize import BOS, EOS, PAD
from attnkit.models.decoding import beam_search, greedy_decode
from attnkit.models.seq2seq_rnn import Seq2SeqRNN

V, E, H = 14, 16, 32
ATTENTIONS = ["none", "bahdanau", "luong"]


def _batch(B=8, S=8, T=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    src_len = torch.randint(3, S + 1, (B,), generator=g)
    src_len[0] = S
    src = torch.randint(4, V, (B, S), generator=g)
    src = torch.where(torch.arange(S)[None] < src_len[:, None], src, torch.full_like(src, PAD))
    y = torch.randint(4, V, (B, T - 1), generator=g)
    tgt_in = torch.cat([torch.full((B, 1), BOS), y], 1)
    tgt_out = torch.cat([y, torch.full((B, 1), EOS)], 1)
    return src, src_len, tgt_in, tgt_out


def _model(attention, cell="gru", bidirectional=True, **kw):
    torch.manual_seed(0)
    return Seq2SeqRNN(V, V, emb_dim=E, hidden=H, cell=cell, bidirectional=bidirectional, attention=attention, **kw)


@pytest.mark.parametrize("attention,cell", [("none", "gru"), ("bahdanau", "gru"), ("luong", "gru"), ("bahdanau", "lstm")])
def test_overfits_one_small_batch(attention, cell):
    model = _model(attention, cell)
    src, src_len, tgt_in, tgt_out = _batch()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(150):
        logits = model(src, src_len, tgt_in).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), tgt_out.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.02, f"{attention}/{cell} stuck at loss {loss.item():.4f}"
    pred = greedy_decode(model, src, src_len, max_len=8)
    assert torch.equal(pred.tokens[:, : tgt_out.shape[1]], tgt_out)  # and decoding reproduces the batch


@pytest.mark.parametrize("attention", ["bahdanau", "luong"])
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_alignments_are_distributions_over_real_source_tokens(attention, cell):
    model = _model(attention, cell)
    src, src_len, tgt_in, _ = _batch()
    al = model(src, src_len, tgt_in).alignments
    assert al.shape == (src.shape[0], tgt_in.shape[1], src.shape[1])  # (B, T_out, T_in)
    torch.testing.assert_close(al.sum(-1), torch.ones(al.shape[:2]), rtol=0, atol=1e-5)
    pad = (torch.arange(src.shape[1])[None] >= src_len[:, None])[:, None, :].expand_as(al)
    assert bool((al[pad] == 0).all())
    assert model.attention_kind == attention


def test_no_attention_model_returns_no_alignments():
    src, src_len, tgt_in, _ = _batch()
    assert _model("none")(src, src_len, tgt_in).alignments is None


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_causality_outputs_up_to_t_ignore_later_targets(attention):
    model = _model(attention).eval()
    src, src_len, tgt_in, _ = _batch()
    base = model(src, src_len, tgt_in).logits
    for t in range(tgt_in.shape[1] - 1):
        changed = tgt_in.clone()
        changed[:, t + 1 :] = torch.randint(4, V, changed[:, t + 1 :].shape)
        out = model(src, src_len, changed).logits
        torch.testing.assert_close(out[:, : t + 1], base[:, : t + 1], rtol=0, atol=0)
        assert not torch.allclose(out[:, t + 1 :], base[:, t + 1 :])  # the test can fail: later steps do move


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("cell,bidirectional", [("gru", True), ("lstm", False)])
def test_extra_padding_changes_nothing(attention, cell, bidirectional):
    model = _model(attention, cell, bidirectional).eval()
    src, src_len, tgt_in, _ = _batch()
    out = model(src, src_len, tgt_in)
    wide = torch.cat([src, torch.full((src.shape[0], 3), PAD)], 1)
    wide[1, src_len[1]:] = 7  # garbage after the length must be ignored too
    out2 = model(wide, src_len, tgt_in)
    torch.testing.assert_close(out2.logits, out.logits, rtol=0, atol=1e-6)
    if out.alignments is not None:
        torch.testing.assert_close(out2.alignments[..., : src.shape[1]], out.alignments, rtol=0, atol=1e-6)
        assert bool((out2.alignments[..., src.shape[1]:] == 0).all())


def _gates(cell):
    return 3 if cell == "gru" else 4


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("cell,bidirectional", [("gru", True), ("lstm", True), ("gru", False)])
def test_parameter_count_matches_formula(attention, cell, bidirectional):
    Vs, Vt, A = 11, 13, 12
    model = Seq2SeqRNN(Vs, Vt, emb_dim=E, hidden=H, cell=cell, bidirectional=bidirectional, attention=attention, attn_dim=A)
    g, dirs = _gates(cell), 2 if bidirectional else 1
    d_enc = dirs * H
    want = Vs * E + dirs * g * (E * H + H * H + 2 * H)  # embedding + encoder RNN (W_ih, W_hh, two biases per gate)
    want += d_enc * H + H  # bridge to s_0 / fixed context
    want += Vt * E + g * ((E + H) * H + H * H + 2 * H)  # target embedding + decoder cell on [y; ctx]
    want += 2 * H * H + H + H * Vt + Vt  # combine [s; ctx] → h̃, output layer
    if attention == "bahdanau":
        want += 2 * H * A + 2 * A + (d_enc * H if d_enc != H else 0)  # W, U (+bias), v; memory projection
    if attention == "luong":
        want += H * H + (d_enc * H if d_enc != H else 0)  # W_a; memory projection
    assert sum(p.numel() for p in model.parameters()) == want


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_beam_one_is_greedy(attention):
    model = _model(attention).eval()
    src, src_len, _, _ = _batch()
    g = greedy_decode(model, src, src_len, max_len=7)
    b = beam_search(model, src, src_len, beam_size=1, max_len=7, alpha=0.6)
    assert torch.equal(b.tokens, g.tokens)
    torch.testing.assert_close(b.scores, g.scores, rtol=0, atol=1e-5)


def test_bad_inputs_get_clear_errors():
    model = _model("bahdanau")
    src, src_len, tgt_in, _ = _batch()
    with pytest.raises(ValueError, match="attention must be one of"):
        Seq2SeqRNN(V, V, attention="dot")
    with pytest.raises(ValueError, match="cell must be one of"):
        Seq2SeqRNN(V, V, cell="rnn")
    with pytest.raises(ValueError, match=r"src_len must lie in \[1, S=8\]"):
        model(src, torch.zeros_like(src_len), tgt_in)
    with pytest.raises(ValueError, match="src_len must be a"):
        model(src, src_len[:3], tgt_in)
    with pytest.raises(ValueError, match="src must be an integer"):
        model(src.float(), src_len, tgt_in)
    with pytest.raises(ValueError, match="tgt_in must be an integer"):
        model(src, src_len, tgt_in[0])
