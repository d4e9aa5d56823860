"""The Transformer from attnkit parts equals PyTorch's own: each encoder/decoder layer and the whole
encoder and decoder stacks (pre-LN and post-LN, relu and gelu, padding and causal masks) give
torch.nn's outputs and gradients to float64 rounding with copied weights. Also: parameter counts
equal the formulas and torch's counts, the sinusoidal table equals the paper's formula, the
decoder is causal, every position choice overfits one batch, and bad inputs raise clear errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from attnkit.data.tokenize import BOS, EOS, PAD
from attnkit.models.transformer import Seq2SeqTransformer
from attnkit.modules.positional import LearnedPositionalEncoding, SinusoidalPositionalEncoding, make_positional_encoding
from attnkit.modules.transformer_layers import TransformerDecoderLayer, TransformerEncoderLayer

D, NH, F = 16, 4, 24
B, S, T = 3, 7, 5
LENGTHS = torch.tensor([7, 4, 2])
F64 = dict(dtype=torch.float64)


def _visible(module):
    """torch initialises biases to 0 and LayerNorm to (1, 0): randomise so every term shows."""
    with torch.no_grad():
        for p in module.parameters():
            if p.dim() == 1:
                p.normal_(0, 0.3)
    return module


def _x(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), **F64).requires_grad_()


def _valid():
    return torch.arange(S)[None] < LENGTHS[:, None]


def _assert_same_grads(ours, ref, pairs):
    for a, b in pairs:
        torch.testing.assert_close(a.grad, b.grad, rtol=0, atol=1e-10)


# layers ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_matches_torch(norm_first, activation):
    torch.manual_seed(0)
    ref = _visible(nn.TransformerEncoderLayer(D, NH, F, dropout=0.0, activation=activation, norm_first=norm_first, batch_first=True, **F64))
    ours = TransformerEncoderLayer.from_torch(ref)
    x1, x2 = _x(B, S, D, seed=1), _x(B, S, D, seed=1)
    want = ref(x1, src_key_padding_mask=~_valid())  # grad enabled: torch takes its plain (non-fused) path
    got = ours(x2, valid=_valid())
    torch.testing.assert_close(got, want, rtol=0, atol=1e-10)
    w = torch.randn_like(want)
    (want * w).sum().backward()
    (got * w).sum().backward()
    torch.testing.assert_close(x2.grad, x1.grad, rtol=0, atol=1e-10)
    _assert_same_grads(ours, ref, [(ours.linear1.weight, ref.linear1.weight), (ours.norm2.bias, ref.norm2.bias), (ours.self_attn.out_proj.weight, ref.self_attn.out_proj.weight)])
    q_grad = ref.self_attn.in_proj_weight.grad[:D]
    torch.testing.assert_close(ours.self_attn.q_proj.weight.grad, q_grad, rtol=0, atol=1e-10)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_decoder_layer_matches_torch(norm_first, activation):
    torch.manual_seed(0)
    ref = _visible(nn.TransformerDecoderLayer(D, NH, F, dropout=0.0, activation=activation, norm_first=norm_first, batch_first=True, **F64))
    ours = TransformerDecoderLayer.from_torch(ref)
    tgt1, tgt2 = _x(B, T, D, seed=2), _x(B, T, D, seed=2)
    mem1, mem2 = _x(B, S, D, seed=3), _x(B, S, D, seed=3)
    causal = nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.float64)
    want = ref(tgt1, mem1, tgt_mask=causal, tgt_is_causal=True, memory_key_padding_mask=~_valid())
    got, w = ours(tgt2, mem2, memory_valid=_valid(), need_weights=True)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-10)
    assert w.shape == (B, T, S) and bool((w[:, :, :][~_valid()[:, None, :].expand(B, T, S)] == 0).all())
    g = torch.randn_like(want)
    (want * g).sum().backward()
    (got * g).sum().backward()
    torch.testing.assert_close(tgt2.grad, tgt1.grad, rtol=0, atol=1e-10)
    torch.testing.assert_close(mem2.grad, mem1.grad, rtol=0, atol=1e-10)
    _assert_same_grads(ours, ref, [(ours.linear2.weight, ref.linear2.weight), (ours.norm3.weight, ref.norm3.weight), (ours.multihead_attn.out_proj.weight, ref.multihead_attn.out_proj.weight)])


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")  # torch's own note about pre-LN stacks
@pytest.mark.parametrize("norm_first", [False, True])
def test_whole_stacks_match_torch_transformer(norm_first):
    """Our model's encode/decode equal nn.TransformerEncoder/Decoder fed the same embeddings."""
    torch.manual_seed(0)
    Vs, Vt = 11, 13
    model = Seq2SeqTransformer(Vs, Vt, d_model=D, nhead=NH, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=F, dropout=0.0, norm_first=norm_first).double()
    ref = _visible(nn.Transformer(D, NH, 2, 2, F, dropout=0.0, norm_first=norm_first, batch_first=True, **F64))
    for mine, theirs in zip(model.encoder_layers, ref.encoder.layers):
        mine.load_state_dict(TransformerEncoderLayer.from_torch(theirs).state_dict())
    for mine, theirs in zip(model.decoder_layers, ref.decoder.layers):
        mine.load_state_dict(TransformerDecoderLayer.from_torch(theirs).state_dict())
    if norm_first:  # torch's stacks always end in a LayerNorm; post-LN layers already end normalised
        model.encoder_norm.load_state_dict(ref.encoder.norm.state_dict())
        model.decoder_norm.load_state_dict(ref.decoder.norm.state_dict())
    enc_norm, dec_norm = (ref.encoder.norm, ref.decoder.norm) if norm_first else (None, None)
    g = torch.Generator().manual_seed(4)
    src = torch.randint(4, Vs, (B, S), generator=g)
    tgt = torch.randint(4, Vt, (B, T), generator=g)
    emb_s = model.src_embed(src) * math.sqrt(D) + model.pos(torch.arange(S))
    emb_t = model.tgt_embed(tgt) * math.sqrt(D) + model.pos(torch.arange(T))
    enc = nn.TransformerEncoder(ref.encoder.layers[0], 2, norm=enc_norm, enable_nested_tensor=False)
    enc.layers = ref.encoder.layers
    mem = enc(emb_s, src_key_padding_mask=~_valid())
    dec = nn.TransformerDecoder(ref.decoder.layers[0], 2, norm=dec_norm)
    dec.layers = ref.decoder.layers
    causal = nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.float64)
    h = dec(emb_t, mem, tgt_mask=causal, tgt_is_causal=True, memory_key_padding_mask=~_valid())
    got_mem, valid = model.encode(src, LENGTHS)
    torch.testing.assert_close(got_mem, mem, rtol=0, atol=1e-10)
    logits = model(src, LENGTHS, tgt).logits
    torch.testing.assert_close(logits, model.out(h), rtol=0, atol=1e-10)


# parameter counts --------------------------------------------------------------------------------
def _enc_formula(d, f):
    return 4 * (d * d + d) + (d * f + f) + (f * d + d) + 2 * 2 * d  # attention (q, k, v, out) + FFN + 2 LayerNorms


def _dec_formula(d, f):
    return 8 * (d * d + d) + (d * f + f) + (f * d + d) + 3 * 2 * d  # self + cross attention, FFN, 3 LayerNorms


def test_layer_parameter_counts_match_formula_and_torch():
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(TransformerEncoderLayer(D, NH, F)) == _enc_formula(D, F) == count(nn.TransformerEncoderLayer(D, NH, F))
    assert count(TransformerDecoderLayer(D, NH, F)) == _dec_formula(D, F) == count(nn.TransformerDecoderLayer(D, NH, F))


@pytest.mark.parametrize("tie", ["none", "decoder", "all"])
@pytest.mark.parametrize("position,norm_first", [("sinusoidal", True), ("learned", False), ("rotary", True)])
def test_model_parameter_count_matches_formula(tie, position, norm_first):
    V, max_len = 17, 64
    m = Seq2SeqTransformer(V, V, d_model=D, nhead=NH, num_encoder_layers=2, num_decoder_layers=3, dim_feedforward=F, position=position, norm_first=norm_first, max_len=max_len, tie_embeddings=tie)
    embeddings = {"none": 3, "decoder": 2, "all": 1}[tie] * V * D  # src, tgt embeddings and the output projection
    want = embeddings + 2 * _enc_formula(D, F) + 3 * _dec_formula(D, F) + (2 * 2 * D if norm_first else 0) + (max_len * D if position == "learned" else 0)
    assert sum(p.numel() for p in m.parameters()) == want
    if tie != "none":
        assert m.out.weight is m.tgt_embed.weight


# positions ---------------------------------------------------------------------------------------
def test_sinusoidal_table_is_the_papers_formula():
    d, P = 10, 50
    pe = SinusoidalPositionalEncoding(d, P, dtype=torch.float64)(torch.arange(P)).numpy()
    p, i = np.arange(P)[:, None], np.arange(d // 2)[None]
    np.testing.assert_allclose(pe[:, 0::2], np.sin(p / 10000 ** (2 * i / d)), rtol=0, atol=1e-12)
    np.testing.assert_allclose(pe[:, 1::2], np.cos(p / 10000 ** (2 * i / d)), rtol=0, atol=1e-12)


def test_positional_encodings_bad_inputs():
    with pytest.raises(ValueError, match=r"positions must lie in \[0, max_len=8\)"):
        LearnedPositionalEncoding(4, 8)(torch.tensor([3, 8]))
    with pytest.raises(TypeError, match="integer tensor"):
        SinusoidalPositionalEncoding(4, 8)(torch.tensor([0.0]))
    with pytest.raises(ValueError, match="position must be one of"):
        make_positional_encoding("relative", 4, 8)


# behaviour ---------------------------------------------------------------------------------------
def _batch(V=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, V, (B, S), generator=g)
    src = torch.where(_valid(), src, torch.full_like(src, PAD))
    y = torch.randint(4, V, (B, T - 1), generator=g)
    return src, torch.cat([torch.full((B, 1), BOS), y], 1), torch.cat([y, torch.full((B, 1), EOS)], 1)


@pytest.mark.parametrize("position", ["sinusoidal", "learned", "rotary"])
@pytest.mark.parametrize("norm_first", [True, False])
def test_decoder_is_causal(position, norm_first):
    m = Seq2SeqTransformer(12, 12, d_model=D, nhead=NH, dim_feedforward=F, position=position, norm_first=norm_first).eval()
    src, tgt_in, _ = _batch()
    base = m(src, LENGTHS, tgt_in).logits
    for t in range(T - 1):
        changed = tgt_in.clone()
        changed[:, t + 1 :] = (changed[:, t + 1 :] + 1 - 4) % 8 + 4
        out = m(src, LENGTHS, changed).logits
        torch.testing.assert_close(out[:, : t + 1], base[:, : t + 1], rtol=0, atol=1e-6)
        assert not torch.allclose(out[:, t + 1 :], base[:, t + 1 :], atol=1e-4)


@pytest.mark.parametrize("position,norm_first,tie", [("sinusoidal", True, "none"), ("rotary", False, "decoder"), ("learned", True, "all")])
def test_overfits_one_small_batch(position, norm_first, tie):
    torch.manual_seed(0)
    V = 12
    m = Seq2SeqTransformer(V, V, d_model=32, nhead=4, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=64, dropout=0.0, position=position, norm_first=norm_first, tie_embeddings=tie)
    src, tgt_in, tgt_out = _batch(V)
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    for _ in range(150):
        loss = nn.functional.cross_entropy(m(src, LENGTHS, tgt_in).logits.reshape(-1, V), tgt_out.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.02, f"{position}/{norm_first}/{tie} stuck at {loss.item():.4f}"


def test_bad_inputs_get_clear_errors():
    with pytest.raises(ValueError, match="src_vocab must equal tgt_vocab"):
        Seq2SeqTransformer(10, 12, tie_embeddings="all")
    with pytest.raises(ValueError, match="tie_embeddings must be one of"):
        Seq2SeqTransformer(10, 12, tie_embeddings=True)
    with pytest.raises(ValueError, match="position must be one of"):
        Seq2SeqTransformer(10, 12, position="alibi")
    with pytest.raises(ValueError, match="embed_dim must be divisible by num_heads"):
        Seq2SeqTransformer(10, 12, d_model=30, nhead=4)
    with pytest.raises(TypeError, match="TransformerEncoderLayer"):
        TransformerEncoderLayer.from_torch(nn.Linear(2, 2))
    m = Seq2SeqTransformer(10, 12, d_model=D, nhead=NH, dim_feedforward=F)
    src, tgt_in, _ = _batch(10)
    with pytest.raises(ValueError, match=r"src_len must lie in \[1, S=7\]"):
        m(src, torch.tensor([7, 0, 2]), tgt_in)
