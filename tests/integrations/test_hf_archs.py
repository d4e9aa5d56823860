"""attnkit inside 42 tiny transformers architectures, each compared with transformers' own "eager".

For every architecture (built from its config class, random weights, no downloads): the model
output on a padded batch, the attention weights when asked for (``output_attentions=True``, also in
models whose ``@capture_outputs`` hooks never pass that flag down), and a cached greedy ``generate``
for decoders and encoder-decoders. Float32 results must sit within 4× eager's own float32 error
against eager run in float64 (plus 1e-6 for rounding); gradients match eager's in float64. Attention
sinks (gpt-oss, Inkling-2) are applied; what attnkit cannot apply is refused with an error, and a
model whose attention layers never call the interface (Bloom, GIT) is refused at load, never run
with the name silently ignored.
Padding query rows are left out of the comparisons: attnkit gives zeros where a row sees no key,
eager an average over padding keys, and neither is used by the models.
"""

from __future__ import annotations

import os

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import hf_tiny_models as tm  # noqa: E402

from attnkit.inspect.capture import capture  # noqa: E402
from attnkit.integrations import hf as akhf  # noqa: E402
from attnkit.integrations import hf_routing  # noqa: E402

NAME = akhf.register()
CALLS = {"encoder": 2, "vision": 2, "decoder": 2, "seq2seq": 6, "audio": 6}  # attention calls per forward
NO_TRUTH_ATOL = 2.5e-5
GENERATES = [a for a in tm.ARCHS if a.kind in ("decoder", "seq2seq", "audio")]


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny calls: one intra-op thread (tests/conftest.py)


def _double(inputs: dict) -> dict:
    return {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}


def _run(arch, output_attentions=False):
    """(eager float32, attnkit float32, eager float64) outputs and the attnkit capture record."""
    eager, ours = tm.pair(arch, NAME)
    x = arch.inputs()
    with torch.no_grad():
        o32 = eager(**x, output_attentions=output_attentions)
        with capture(ours, record="reports") as rec:
            mine = ours(**x, output_attentions=output_attentions)
        o64 = eager.double()(**_double(x), output_attentions=output_attentions) if arch.float64 else None
    return o32, mine, o64, rec


def _main(out):
    return None if out is None else tm.main_output(out)


def _check(ours, theirs, truth, rows=None, what=""):
    """max |ours − theirs| over defined rows; asserts ours is within 4× eager's own float64 error.

    Without a float64 truth (``truth`` None), within NO_TRUTH_ATOL of eager: 3× the largest gap of any
    architecture that has one (mT5, 7.6e-6).
    """
    assert ours.shape == theirs.shape, what
    if rows is not None:
        if ours.dim() == 4:  # attention weights (B, H, L, S): rows pick queries
            rows = rows[:, None, :, None].expand(ours.shape)
        ours, theirs = ours[rows], theirs[rows]
        truth = None if truth is None else truth[rows]
    if truth is None:
        diff = (ours - theirs).abs().max().item()
        assert diff <= NO_TRUTH_ATOL, f"{what}: attnkit vs eager {diff:.3g}"
        return diff
    hf_err = (theirs.double() - truth).abs().max().item()
    our_err = (ours.double() - truth).abs().max().item()
    assert our_err <= 4 * hf_err + 1e-6, f"{what}: attnkit {our_err:.3g} vs float64, eager {hf_err:.3g}"
    return (ours - theirs).abs().max().item()


@pytest.mark.parametrize("arch", tm.ARCHS, ids=lambda a: a.name)
def test_output_on_padded_batch_matches_eager(arch):
    o32, mine, o64, rec = _run(arch)
    assert len(rec) == CALLS[arch.kind], "attnkit did not run every attention call"
    diff = _check(tm.main_output(mine), tm.main_output(o32), _main(o64), arch.real_queries(), arch.name)
    assert diff <= 1e-4


def _attention_rows(arch, field: str):
    """(B, L) bool of defined query rows for one attentions field, or None when every row is defined."""
    real = arch.real_queries()
    if arch.kind in ("encoder", "decoder"):
        return real
    if arch.kind == "seq2seq":
        return arch.inputs()["attention_mask"].bool() if field == "encoder_attentions" else None
    if arch.kind == "audio":
        return None if field == "encoder_attentions" else real
    return None


@pytest.mark.parametrize("arch", tm.ARCHS, ids=lambda a: a.name)
def test_output_attentions_returns_the_weights_eager_returns(arch):
    o32, mine, o64, _ = _run(arch, output_attentions=True)
    fields = [f for f in ("attentions", "encoder_attentions", "decoder_attentions", "cross_attentions")
              if getattr(o32, f, None)]  # eager gives () for cross_attentions of decoder-only models
    assert fields, "eager returned no attentions: the test would show nothing"
    for f in fields:
        theirs, ours, truth = getattr(o32, f), getattr(mine, f), getattr(o64, f) if o64 is not None else None
        assert ours is not None and len(ours) == len(theirs) > 0, f"{f}: eager gives {len(theirs)}, attnkit {ours!r}"
        rows = _attention_rows(arch, f)
        for i, (a, b, t) in enumerate(zip(ours, theirs, truth or [None] * len(theirs))):
            _check(a, b, t, rows, f"{arch.name} {f}[{i}]")
    # and the outputs stay right on the weight-returning path
    _check(tm.main_output(mine), tm.main_output(o32), _main(o64), arch.real_queries(), arch.name)


@pytest.mark.parametrize("arch", GENERATES, ids=lambda a: a.name)
def test_cached_greedy_generate_matches_eager(arch):
    eager, ours = tm.pair(arch, NAME)
    x = arch.inputs(left=arch.kind == "decoder")
    x.pop("decoder_input_ids", None)
    x.pop("decoder_attention_mask", None)
    kw = dict(max_new_tokens=4, min_new_tokens=4, do_sample=False, use_cache=True, return_dict_in_generate=True,
              output_logits=True, pad_token_id=1)
    with torch.no_grad():
        theirs = eager.generate(**x, **kw)
        with capture(ours, record="reports") as rec:
            mine = ours.generate(**x, **kw)
    assert torch.equal(mine.sequences, theirs.sequences)
    assert len(mine.logits) == len(theirs.logits) == 4
    assert len(rec) >= 4 * 2  # one call per layer per step at least: the cache path ran through attnkit
    for step, (a, b) in enumerate(zip(mine.logits, theirs.logits)):
        assert (a - b).abs().max().item() <= 1e-4, f"step {step}"


def test_bloom_is_refused_at_load_not_run_wrong(tmp_path):
    cfg = dict(hidden_size=32, n_layer=2, n_head=4, vocab_size=tm.V)
    with pytest.raises(ValueError, match=r'BloomForCausalLM.*attn_implementation="eager"'):
        transformers.BloomForCausalLM(transformers.BloomConfig(**cfg, attn_implementation=NAME))
    eager = transformers.BloomForCausalLM(transformers.BloomConfig(**cfg, attn_implementation="eager")).eval()
    eager.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="compute attention themselves"):
        transformers.BloomForCausalLM.from_pretrained(tmp_path, attn_implementation=NAME)
    # eager Bloom is untouched by the check, and switching it later leaves it on eager (transformers warns)
    ids = torch.randint(0, tm.V, (1, 6))
    with torch.no_grad():
        before = eager(ids).logits
        eager.set_attn_implementation(NAME)
        assert eager.config._attn_implementation == "eager"
        assert torch.equal(eager(ids).logits, before)


def test_routing_check_reads_the_model_source():
    assert not hf_routing.routes_through_interface(transformers.BloomModel)
    assert not hf_routing.routes_through_interface(transformers.GPTNeoModel)
    for cls in (transformers.LlamaModel, transformers.BartModel, transformers.FalconModel, transformers.T5Model):
        assert hf_routing.routes_through_interface(cls), cls.__name__
    hf_routing.check_model_class(transformers.BertModel, NAME)  # no error


def test_falcon_keeps_attnkit_through_save_and_load(tmp_path):
    # Falcon once overrode _check_and_enable_sdpa to force "sdpa" whatever was asked; it must not happen silently
    arch = tm.BY_NAME["falcon"]
    arch.build("eager").save_pretrained(tmp_path)
    m = transformers.FalconForCausalLM.from_pretrained(tmp_path, attn_implementation=NAME).eval()
    assert m.config._attn_implementation == NAME
    with torch.no_grad(), capture(m, record="reports") as rec:
        m(**arch.inputs())
    assert len(rec) == 2


def _wide_window(arch):
    """The same architecture with a window (64) longer than the prompt, which transformers then drops."""
    def config(impl):
        cfg = arch.config(impl)
        if arch.name == "modernbert":
            return type(cfg)(**{**cfg.to_dict(), "local_attention": 128, "attn_implementation": impl})
        cfg.sliding_window = 64
        return cfg

    return tm.Arch(arch.name, config, arch.model, arch.kind)


@pytest.mark.parametrize("name", ["mistral", "gemma2", "gemma3", "starcoder2", "modernbert"])
def test_window_longer_than_an_unpadded_prompt(name):
    # transformers builds no mask here (the window cannot bind); attnkit used to raise "sliding_window without a mask"
    arch = _wide_window(tm.BY_NAME[name])
    eager, ours = tm.pair(arch, NAME)
    x = arch.inputs()
    x["attention_mask"] = torch.ones_like(x["attention_mask"])
    with torch.no_grad():
        theirs = tm.main_output(eager(**x))
        with capture(ours, record="reports") as rec:
            mine = tm.main_output(ours(**x))
        truth = tm.main_output(eager.double()(**x))
    assert len(rec) == 2
    _check(mine, theirs, truth, None, name)
    if arch.kind == "decoder":
        kw = dict(max_new_tokens=3, min_new_tokens=3, do_sample=False, pad_token_id=1)
        with torch.no_grad():
            assert torch.equal(ours.generate(**x, **kw), eager.float().generate(**x, **kw))


def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0, head_mask=None):
    """Stands for a model file whose eager attention reads an argument attnkit does not implement."""


class HeadMaskedAttention(torch.nn.Module):
    pass


def test_arguments_only_the_models_eager_function_reads_are_refused():
    with pytest.raises(ValueError, match=r"HeadMaskedAttention passes \['head_mask'\].*attn_implementation='eager'"):
        akhf._reject_unhandled(HeadMaskedAttention(), {"head_mask": torch.ones(4)})
    akhf._reject_unhandled(HeadMaskedAttention(), {"head_mask": None, "position_ids": torch.arange(3)})  # fine


def test_attention_sinks_run_on_a_forced_sdpa_backend():
    # gpt-oss passes s_aux (H,); sdpa's log-sum-exp carries gradients, so a forced sdpa applies the sink
    # exactly: logits equal eager's (the sink moves them, so equality is not vacuous)
    name = akhf.register("attnkit_fused_sink_test", backend="sdpa")
    arch = tm.BY_NAME["gpt_oss"]
    eager, ours = arch.build("eager"), arch.build(name)
    ours.load_state_dict(eager.state_dict())
    with torch.no_grad():
        want, got = eager(**arch.inputs()).logits, ours(**arch.inputs()).logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"attention sinks must be"):
        akhf._sink_logits(torch.zeros(3), B=2, H=4, L=5)


def test_eager_only_arguments_are_read_from_the_models_own_eager_function():
    # T5's eager adds position_bias, Inkling-2's reads sinks: both handled; this file's reads head_mask
    ink = transformers.models.inkling2.modeling_inkling2
    cls = next(c for n, c in vars(ink).items() if n.endswith("Attention") and isinstance(c, type))
    for handled in (transformers.models.t5.modeling_t5.T5Attention, cls):
        assert akhf._eager_only_args(handled) == frozenset(), handled.__name__
    assert akhf._eager_only_args(HeadMaskedAttention) == {"head_mask"}


def test_models_with_an_attention_class_table_are_refused():
    # GIT picks GIT_SELF_ATTENTION_CLASSES[config._attn_implementation]: a KeyError deep inside, before
    cfg = transformers.GitConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                 vocab_size=tm.V, max_position_embeddings=64, pad_token_id=1, attn_implementation=NAME)
    with pytest.raises(ValueError, match="GitForCausalLM"):
        transformers.GitForCausalLM(cfg)


@pytest.mark.parametrize("bad", ["attnkit_sdpa", "my_flash", "flex_mine", "eager2", "paged|attnkit", ""])
def test_register_rejects_names_transformers_reads_as_its_own(bad):
    # "sdpa" anywhere in the name makes transformers run its own sdpa support checks (GptOss then refuses it)
    with pytest.raises(ValueError, match="name must be"):
        akhf.register(bad)


@pytest.mark.parametrize("name", ["bert", "llama", "gemma2", "t5", "gpt_oss", "whisper"])
def test_gradients_match_eager_in_float64(name):
    # fine-tuning through attnkit: every parameter's gradient equals eager's. Both run in float64, but
    # most eager functions take their softmax in float32 (``dtype=torch.float32``), so they sit ~1e-7 apart
    arch = tm.BY_NAME[name]
    eager, ours = tm.pair(arch, NAME)
    x = _double(arch.inputs())
    rows = arch.real_queries()
    grads = []
    for m in (eager.double(), ours.double()):
        params = [p for p in m.parameters() if p.requires_grad]
        out = tm.main_output(m(**x))
        w = torch.randn(out.shape, generator=torch.Generator().manual_seed(2), dtype=out.dtype)
        loss = ((out * w)[rows] if rows is not None else out * w).sum()
        grads.append([torch.zeros_like(p) if g is None else g for p, g in
                      zip(params, torch.autograd.grad(loss, params, allow_unused=True))])
    scale = max(g.abs().max().item() for g in grads[0])
    worst = max((g - h).abs().max().item() for g, h in zip(*grads)) / scale
    assert scale > 0 and worst <= 1e-6, f"max gradient gap {worst:.3g} of the largest gradient"


def test_composite_vision_language_model_runs_every_tower_on_attnkit():
    # LLaVA: a CLIP vision tower and a Llama text model, each a PreTrainedModel with its own sub-config;
    # the name must reach both (4 attention calls) and the result match eager on the real tokens
    def config(impl):
        return transformers.LlavaConfig(vision_config=transformers.CLIPVisionConfig(**tm._VIS),
                                        text_config=transformers.LlamaConfig(**tm._lm(num_key_value_heads=2)),
                                        image_token_id=5, vision_feature_layer=-1, image_seq_length=16,
                                        attn_implementation=impl)

    arch = tm.Arch("llava", config, transformers.LlavaForConditionalGeneration, "decoder")
    eager, ours = tm.pair(arch, NAME)
    assert ours.config.vision_config._attn_implementation == ours.config.text_config._attn_implementation == NAME
    ids = torch.randint(6, tm.V, (2, 20), generator=torch.Generator().manual_seed(3))
    ids[:, 1:17] = 5  # 16 image tokens: (16 / 4)² patches
    real = torch.ones_like(ids)
    real[1, 18:] = 0
    x = dict(input_ids=ids, attention_mask=real, pixel_values=torch.randn(2, 3, 16, 16), output_attentions=True)
    with torch.no_grad():
        theirs = eager(**x)
        with capture(ours, record="reports") as rec:
            mine = ours(**x)
    assert len(rec) == 4
    assert (mine.logits - theirs.logits)[real.bool()].abs().max().item() <= 1e-5
    assert len(mine.attentions) == len(theirs.attentions) == 2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("name", ["bert", "llama", "gemma2", "t5", "gpt_oss", "falcon_alibi", "whisper"])
def test_half_precision_within_twice_eagers_own_error(name, dtype):
    # the flash-attention rule: against the float64 model, attnkit in half precision may be off by at most
    # 2x what eager is off in the same dtype (softcap, relative bias, ALiBi and sinks included)
    arch = tm.BY_NAME[name]
    eager, ours = tm.pair(arch, NAME)
    x = arch.inputs()
    half = {k: v.to(dtype) if v.is_floating_point() else v for k, v in x.items()}
    with torch.no_grad():
        theirs = tm.main_output(eager.to(dtype)(**half))
        mine = tm.main_output(ours.to(dtype)(**half))
        truth = tm.main_output(eager.double()(**_double(x)))
    rows = arch.real_queries()
    if rows is not None:
        mine, theirs, truth = mine[rows], theirs[rows], truth[rows]
    hf_err = (theirs.double() - truth).abs().max().item()
    our_err = (mine.double() - truth).abs().max().item()
    assert our_err <= 2 * hf_err, f"attnkit {our_err:.3g}, eager {hf_err:.3g} in {dtype}"
