"""attnkit's BERT on all-MiniLM-L6-v2 against Hugging Face's BertModel (eager) and sentence-transformers.

Tolerances: fp32 hidden states within 1e-5 of HF fp32 (the issue's bar) *and* no further from HF's
float64 run than a small multiple of HF fp32's own error; in float64 both implementations agree to
~1e-12, which shows the math is the same and the fp32 gap is rounding.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from _minilm_sentences import SENTENCES

from attnkit.inspect.capture import capture
from attnkit.models.bert import BertConfig, BertModel, mean_pool, sentence_embedding
from attnkit.models.bert_loader import BertTokenizer, SentenceEncoder, load_state_dict_strict, minilm_path


def _real(batch):
    return batch.attention_mask.bool()  # (B, L): compare real tokens; padded rows are not defined outputs


def test_sentences_are_varied(batch):
    lengths = batch.attention_mask.sum(1)
    assert len(SENTENCES) >= 20
    assert int(lengths.min()) <= 5 and int(lengths.max()) >= 30  # padding really happens


def test_hidden_states_match_hf_eager(minilm, batch, hf_eager_outputs):
    model, _ = minilm
    o32, o64 = hf_eager_outputs
    real = _real(batch)
    with torch.no_grad():
        out = model(**batch.as_kwargs(), output_hidden_states=True)
    assert len(out.hidden_states) == len(o32.hidden_states) == 7
    for i, (ours, theirs, truth) in enumerate(zip(out.hidden_states, o32.hidden_states, o64.hidden_states)):
        err = (ours - theirs).abs()[real].max().item()
        assert err <= 1e-5, f"layer {i}: max |attnkit - HF| = {err:.2e}"
        ours_err = (ours.double() - truth).abs()[real].max().item()
        hf_err = (theirs.double() - truth).abs()[real].max().item()
        assert ours_err <= 4 * hf_err + 1e-6, f"layer {i}: attnkit fp32 error {ours_err:.2e} vs HF fp32 error {hf_err:.2e}"
    assert (out.pooler_output - o32.pooler_output).abs().max().item() <= 1e-5


def test_float64_is_the_same_math(minilm, batch, hf_eager_outputs):
    model, _ = minilm
    _, o64 = hf_eager_outputs
    m64 = copy.deepcopy(model).double()
    with torch.no_grad():
        out = m64(**batch.as_kwargs(), output_hidden_states=True)
    real = _real(batch)
    for ours, truth in zip(out.hidden_states, o64.hidden_states):
        assert (ours - truth).abs()[real].max().item() <= 1e-10


def test_sentence_embeddings_match(minilm, batch, hf_eager_outputs):
    model, _ = minilm
    o32, _ = hf_eager_outputs
    with torch.no_grad():
        ours = sentence_embedding(model, **batch.as_kwargs())
    theirs = F.normalize(mean_pool(o32.last_hidden_state, batch.attention_mask), dim=-1)
    cos = F.cosine_similarity(ours, theirs, dim=-1)
    assert cos.min().item() >= 0.99999
    assert torch.allclose(ours.norm(dim=-1), torch.ones(len(SENTENCES)), atol=1e-5)


def test_sentence_embeddings_match_sentence_transformers(minilm):
    st = pytest.importorskip("sentence_transformers")
    ref = st.SentenceTransformer(str(minilm_path()), device="cpu", local_files_only=True)
    theirs = torch.as_tensor(ref.encode(SENTENCES[:8], convert_to_numpy=True, batch_size=8))
    ours = SentenceEncoder(*minilm).encode(SENTENCES[:8])
    assert F.cosine_similarity(ours, theirs, dim=-1).min().item() >= 0.99999


def test_output_attentions_match_hf(minilm, batch, hf_eager_outputs):
    model, _ = minilm
    o32, o64 = hf_eager_outputs
    with torch.no_grad():
        out = model(**batch.as_kwargs(), output_attentions=True)
    for ours, theirs, truth in zip(out.attentions, o32.attentions, o64.attentions):
        assert ours.shape == theirs.shape
        hf_err = (theirs.double() - truth).abs().max().item()
        assert (ours.double() - truth).abs().max().item() <= 4 * hf_err + 1e-6
        # padded keys get exactly zero weight, rows sum to 1
        assert torch.all(ours.masked_select(~batch.attention_mask.bool()[:, None, None, :]) == 0)
        assert torch.allclose(ours.sum(-1), torch.ones(()), atol=1e-5)


def test_captured_weights_equal_hf_attentions_on_fused_backend(minilm, batch, hf_eager_outputs):
    model, _ = minilm
    o32, o64 = hf_eager_outputs
    with torch.no_grad():
        plain = model(**batch.as_kwargs()).last_hidden_state
        with capture(model) as rec:
            out = model(**batch.as_kwargs()).last_hidden_state
    assert torch.equal(out, plain)  # capturing does not change the model's computation
    assert rec.backends() == {"sdpa": 6}  # the model kept its fused backend
    assert [r.name for r in rec] == [f"layers.{i}.attention" for i in range(6)]
    for ours, theirs, truth in zip(rec.attentions, o32.attentions, o64.attentions):
        hf_err = (theirs.double() - truth).abs().max().item()
        assert (ours.double() - truth).abs().max().item() <= 4 * hf_err + 1e-6
        assert (ours - theirs).abs().max().item() <= 2e-5


def test_head_mask_equals_zeroing_the_output_projection(minilm, batch):
    """Ablating head h of layer l must equal removing h's slice of that layer's W_o (an independent route)."""
    model, _ = minilm
    layer, head = 2, 5
    E = model.config.hidden_size // model.num_heads
    hm = torch.ones(model.num_layers, model.num_heads)
    hm[layer, head] = 0.0
    cut = copy.deepcopy(model)
    with torch.no_grad():
        cut.layers[layer].attention.out_proj.weight[:, head * E:(head + 1) * E] = 0.0
        a = model(**batch.as_kwargs(), head_mask=hm).last_hidden_state
        b = cut(**batch.as_kwargs()).last_hidden_state
        full = model(**batch.as_kwargs()).last_hidden_state
        same = model(**batch.as_kwargs(), head_mask=torch.ones(model.num_layers, model.num_heads)).last_hidden_state
    assert (a - b).abs().max().item() <= 1e-5
    assert (a - full).abs().max().item() > 1e-3  # the ablation did something
    assert torch.equal(same, full)


def test_head_importance_by_ablation(minilm):
    from attnkit.inspect.rollout import head_importance

    model, tok = minilm
    b = tok(SENTENCES[:1])

    def run_fn(head_mask):
        return sentence_embedding(model, **b.as_kwargs(), head_mask=head_mask)[0]

    imp = head_importance(run_fn, model.num_layers, model.num_heads)
    assert imp.shape == (6, 12)
    assert torch.isfinite(imp).all() and (imp >= -1e-6).all() and imp.max() > 1e-4


def test_strict_loading_names_missing_unused_and_misshaped(minilm):
    from safetensors.torch import load_file

    model, _ = minilm
    tensors = load_file(str(minilm_path() / "model.safetensors"))
    fresh = BertModel(model.config)
    load_state_dict_strict(fresh, dict(tensors))  # every tensor used, every parameter set
    with torch.no_grad():
        assert torch.equal(fresh.layers[3].attention.k_proj.weight, model.layers[3].attention.k_proj.weight)
    missing = {k: v for k, v in tensors.items() if k != "encoder.layer.4.intermediate.dense.bias"}
    with pytest.raises(ValueError, match=r"layers\.4\.intermediate\.bias"):
        load_state_dict_strict(BertModel(model.config), missing)
    extra = dict(tensors, **{"cls.predictions.bias": torch.zeros(3)})
    with pytest.raises(ValueError, match="cls.predictions.bias"):
        load_state_dict_strict(BertModel(model.config), extra)
    bad = dict(tensors, **{"pooler.dense.bias": torch.zeros(7)})
    with pytest.raises(ValueError, match="pooler.dense.bias"):
        load_state_dict_strict(BertModel(model.config), bad)


def test_bad_inputs_raise_clear_errors(minilm):
    model, _ = minilm
    ids = torch.tensor([[101, 2009, 102]])
    with pytest.raises(ValueError, match="unsqueeze"):
        model(ids[0])
    with pytest.raises(TypeError, match="input_ids"):
        model(ids.float())
    with pytest.raises(ValueError, match="attention_mask"):
        model(ids, torch.ones(1, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="head_mask"):
        model(ids, head_mask=torch.ones(5, 12))
    with pytest.raises(ValueError, match="positions"):
        model(torch.zeros(1, 600, dtype=torch.long))
    with pytest.raises(ValueError, match="input_ids must lie"):
        model(torch.tensor([[101, 99999, 102]]))
    with pytest.raises(ValueError, match="divisible"):
        BertConfig(hidden_size=10, num_attention_heads=3)
    with pytest.raises(ValueError, match="max_length"):
        BertTokenizer(max_length=1)


def test_fully_padded_row_gives_finite_zero_embedding(minilm):
    model, _ = minilm
    ids = torch.tensor([[101, 2009, 102], [0, 0, 0]])
    mask = torch.tensor([[1, 1, 1], [0, 0, 0]])
    with torch.no_grad():
        out = model(ids, mask)
        emb = mean_pool(out.last_hidden_state, mask)
    assert torch.isfinite(out.last_hidden_state).all()
    assert torch.equal(emb[1], torch.zeros(emb.shape[1]))


def test_gradients_flow_and_are_finite(minilm):
    model, tok = minilm
    m = copy.deepcopy(model)
    b = tok(SENTENCES[:3])
    emb = sentence_embedding(m, **b.as_kwargs())
    emb.sum().backward()
    grads = [p.grad for p in m.parameters() if p.grad is not None]
    assert len(grads) > 90 and all(torch.isfinite(g).all() for g in grads)


def test_minilm_tiled_summaries_equal_dense_statistics(minilm, batch):
    """On the real model and padded batch: summaries computed tile by tile == statistics of the dense weights."""
    from attnkit.inspect.metrics import row_summaries_from_weights

    model, _ = minilm
    with torch.no_grad():
        with capture(model, record="weights") as dense:
            model(**batch.as_kwargs())
        with capture(model, record="summaries", k=4, tile_elements=24 * 12 * 8 * 16, kv_block=16) as tiled:
            model(**batch.as_kwargs())
    assert tiled.backends() == {"sdpa": 6}
    for w, s in zip(dense.attentions, tiled.summaries):
        ref = row_summaries_from_weights(w.double(), 4)
        for f in ("entropy", "max_weight", "topk_weights", "sink_mass", "distance", "mass"):
            assert torch.allclose(getattr(s, f).double(), getattr(ref, f), atol=2e-5), f
        # padded keys never appear among the top keys
        idx = s.topk_indices.clamp(min=0)
        real_key = batch.attention_mask.bool()[:, None, None, :].expand(*idx.shape[:3], -1).gather(-1, idx)
        assert bool((real_key | (s.topk_indices < 0)).all())
