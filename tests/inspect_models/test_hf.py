"""attnkit as a transformers attention implementation: parity with "eager", reports, mask conversion."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from attnkit.core import masks as M  # noqa: E402
from attnkit.inspect.capture import capture  # noqa: E402
from attnkit.integrations import hf as akhf  # noqa: E402
from attnkit.models.bert_loader import minilm_path  # noqa: E402

FUSED = {"sdpa"}  # backends that never form the (L, S) matrix in memory for the caller


@pytest.fixture(scope="module")
def hf_attnkit():
    akhf.register()
    return transformers.BertModel.from_pretrained(str(minilm_path()), attn_implementation="attnkit").eval()


def test_bert_attnkit_equals_eager(hf_attnkit, batch, hf_eager_outputs):
    o32, o64 = hf_eager_outputs
    real = batch.attention_mask.bool()
    with torch.no_grad():
        out = hf_attnkit(**batch.as_kwargs(), output_attentions=True, output_hidden_states=True)
    for ours, theirs, truth in zip(out.hidden_states, o32.hidden_states, o64.hidden_states):
        assert (ours - theirs).abs()[real].max().item() <= 1e-5
        hf_err = (theirs.double() - truth).abs()[real].max().item()
        assert (ours.double() - truth).abs()[real].max().item() <= 4 * hf_err + 1e-6
    assert len(out.attentions) == 6
    for ours, theirs, truth in zip(out.attentions, o32.attentions, o64.attentions):
        hf_err = (theirs.double() - truth).abs().max().item()
        assert (ours.double() - truth).abs().max().item() <= 4 * hf_err + 1e-6


def test_report_shows_fused_backend_without_weights(hf_attnkit, batch):
    with torch.no_grad():
        with capture(hf_attnkit, record="reports") as rec:
            out = hf_attnkit(**batch.as_kwargs())
    assert out.attentions is None
    assert len(rec) == 6 and set(rec.backends()) <= FUSED, str(rec.reports[0])
    assert all(r.report.exact for r in rec)
    assert [r.name for r in rec] == [f"encoder.layer.{i}.attention.self" for i in range(6)]
    with torch.no_grad():
        with capture(hf_attnkit, record="reports") as rec2:
            out = hf_attnkit(**batch.as_kwargs(), output_attentions=True)
    assert not set(rec2.backends()) & FUSED  # weights were asked for: a weight-returning backend ran
    assert out.attentions[0] is not None


def test_capture_through_hf_keeps_fused_backend_and_records_weights(hf_attnkit, batch, hf_eager_outputs):
    o32, _ = hf_eager_outputs
    with torch.no_grad():
        plain = hf_attnkit(**batch.as_kwargs()).last_hidden_state
        with capture(hf_attnkit, layers=[0, "encoder.layer.5.*"], heads=[1, 7]) as rec:
            out = hf_attnkit(**batch.as_kwargs()).last_hidden_state
    assert torch.equal(plain, out)
    assert set(rec.backends()) <= FUSED
    assert [r.layer for r in rec] == [0, 5]
    for r, li in zip(rec, (0, 5)):
        assert (r.weights - o32.attentions[li][:, [1, 7]]).abs().max().item() <= 2e-5


def test_forced_backend_name(batch, hf_eager_outputs):
    name = akhf.register("attnkit_reference_test", backend="reference")
    m = transformers.BertModel.from_pretrained(str(minilm_path()), attn_implementation=name).eval()
    with torch.no_grad(), capture(m, record="reports") as rec:
        out = m(**batch.as_kwargs())
    assert rec.backends() == {"reference": 6}
    real = batch.attention_mask.bool()
    assert (out.last_hidden_state - hf_eager_outputs[0].last_hidden_state).abs()[real].max().item() <= 1e-5


def test_register_rejects_bad_names():
    with pytest.raises(ValueError, match="name"):
        akhf.register("sdpa")
    with pytest.raises(ValueError, match="backend"):
        akhf.register("attnkit_x", backend="no_such_backend")


def _eager_and_attnkit(cls, *, seed: int, **cfg):
    """A tiny random Llama (2 layers, 4 query heads) twice with the same weights: eager, and on attnkit."""
    config = transformers.LlamaConfig(num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64, **cfg)
    torch.manual_seed(seed)
    eager = cls(config).eval()
    eager.set_attn_implementation("eager")
    ours = cls(config).eval()
    ours.load_state_dict(eager.state_dict())
    ours.set_attn_implementation("attnkit")
    return eager, ours


def test_decoder_with_gqa_causal_and_left_padding_equals_eager():
    """A tiny randomly initialised Llama (GQA 4/2, causal, RoPE), left padded: attnkit == eager on real tokens."""
    akhf.register()
    eager, ours = _eager_and_attnkit(transformers.LlamaModel, seed=0, vocab_size=97, hidden_size=64, intermediate_size=128, num_key_value_heads=2)
    ids = torch.randint(1, 97, (3, 11))
    mask = torch.ones(3, 11, dtype=torch.long)
    mask[1, :4] = 0
    mask[2, :9] = 0
    with torch.no_grad():
        a = eager(input_ids=ids, attention_mask=mask, output_attentions=True)
        b = ours(input_ids=ids, attention_mask=mask, output_attentions=True)
        c = ours(input_ids=ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    assert (a.last_hidden_state - b.last_hidden_state).abs()[real].max().item() <= 1e-5
    assert (a.last_hidden_state - c).abs()[real].max().item() <= 1e-5
    assert torch.isfinite(c).all()
    for wa, wb in zip(a.attentions, b.attentions):
        assert (wa - wb).abs()[real[:, None, :, None].expand_as(wa)].max().item() <= 1e-5
    # no padding: the mask is skipped and attnkit applies its own causal mask
    with torch.no_grad():
        a2 = eager(input_ids=ids).last_hidden_state
        b2 = ours(input_ids=ids).last_hidden_state
    assert (a2 - b2).abs().max().item() <= 1e-5


# ------------------------------------------------------------------------------- mask conversion
def test_convert_bool_key_padding_becomes_padding_mask():
    valid = torch.tensor([[True, True, False], [True, True, True]])
    am = valid[:, None, None, :].expand(2, 1, 4, 3)
    mask, bias = akhf.convert_hf_mask(am, 3)
    assert isinstance(mask, M.KeyPaddingMask) and bias is None
    assert torch.equal(mask.materialize(4, 3, batch=2)[:, 0], am[:, 0])
    assert akhf.convert_hf_mask(torch.ones(2, 1, 4, 3, dtype=torch.bool), 3) == (None, None)


@pytest.mark.parametrize("fill", [float("-inf"), "finfo_min"])
def test_convert_float_additive_mask_without_magic_numbers(fill):
    dtype = torch.float32
    value = torch.finfo(dtype).min if fill == "finfo_min" else fill
    am = torch.zeros(1, 1, 3, 3)
    am[0, 0, 0, 2] = value
    am[0, 0, 1, 0] = 0.5  # a genuine additive bias survives
    am[0, 0, 2, :] = value  # a fully masked row
    mask, bias = akhf.convert_hf_mask(am, 3)
    allowed = mask.materialize(3, 3)
    assert allowed[0, 0, 0, 2].item() is False and allowed[0, 0, 2].any().item() is False
    assert bias is not None and bias.t[0, 0, 1, 0].item() == 0.5 and torch.isfinite(bias.t).all()
    # through the HF function: the fully masked row is zeros (eager would give a uniform average), never NaN
    fwd = akhf.make_attention_forward("auto")
    q = torch.randn(1, 2, 3, 4, requires_grad=True)
    mod = torch.nn.Module()
    out, _ = fwd(mod, q, q, q, am)
    assert torch.isfinite(out).all() and torch.equal(out[0, 2], torch.zeros(2, 4))
    out.sum().backward()
    assert torch.isfinite(q.grad).all()


def test_convert_rejects_bad_masks():
    with pytest.raises(ValueError, match="4-D"):
        akhf.convert_hf_mask(torch.ones(2, 3), 3)
    with pytest.raises(TypeError, match="bool"):
        akhf.convert_hf_mask(torch.ones(1, 1, 2, 2, dtype=torch.long), 2)


def test_greedy_generation_with_kv_cache_matches_eager():
    """Decoding (L = 1 queries over a growing cache) through attnkit gives eager's tokens and logits."""
    akhf.register()
    eager, ours = _eager_and_attnkit(transformers.LlamaForCausalLM, seed=1, vocab_size=61, hidden_size=32, intermediate_size=64, num_key_value_heads=1)
    ids = torch.randint(1, 61, (2, 6))
    mask = torch.ones_like(ids)
    mask[1, :2] = 0  # left padding
    kw = dict(max_new_tokens=8, do_sample=False, output_scores=True, return_dict_in_generate=True, pad_token_id=0)
    with torch.no_grad():
        a = eager.generate(input_ids=ids, attention_mask=mask, **kw)
        with capture(ours, record="reports") as rec:
            b = ours.generate(input_ids=ids, attention_mask=mask, **kw)
    assert torch.equal(a.sequences, b.sequences)
    for sa, sb in zip(a.scores, b.scores):
        assert (sa - sb).abs().max().item() <= 1e-4
    assert len(rec) == 2 * 8 and {r.shape["L"] for r in rec} == {6, 1}
