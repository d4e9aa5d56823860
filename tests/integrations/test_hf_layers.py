"""from_hf_attention: each supported Hugging Face attention layer, taken out of its model, computes
what transformers' eager layer computes (output and input gradient, float32, within 1e-5), and its
attnkit cache decodes token by token to the same outputs as the prefill."""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("transformers", minversion="5.0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import hf_layer_cases as hc  # noqa: E402

from attnkit.integrations.hf import from_hf_attention  # noqa: E402
from attnkit.integrations.hf_layers import SUPPORTED  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
TOL = 1e-5
B, L, PROMPT = 2, 9, 4


def _x(module, requires_grad=False):
    g = torch.Generator().manual_seed(1)
    return torch.randn(B, L, module.config.hidden_size, generator=g).requires_grad_(requires_grad)


@pytest.mark.parametrize("case", hc.CASES, ids=hc.IDS)
def test_prefill_output_and_input_gradient_match_eager(case):
    src = hc.build(case)
    ours = from_hf_attention(src)
    x1, x2 = _x(src, True), _x(src, True)
    theirs = hc.hf_forward(src, x1)
    mine, _ = ours(x2)
    assert (mine - theirs).abs().max().item() <= TOL
    g = torch.randn_like(theirs)
    (theirs * g).sum().backward()
    (mine * g).sum().backward()
    assert (x1.grad - x2.grad).abs().max().item() <= TOL


@pytest.mark.parametrize("case", hc.CASES, ids=hc.IDS)
def test_token_by_token_decoding_equals_prefill(case):
    ours = from_hf_attention(hc.build(case))
    x = torch.randn(B, L, ours.embed_dim, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full, _ = ours(x)
        cache = ours.new_cache()
        steps = [ours(x[:, :PROMPT], cache=cache)[0]] + [ours(x[:, t:t + 1], cache=cache)[0] for t in range(PROMPT, L)]
    assert (torch.cat(steps, 1) - full).abs().max().item() <= TOL
    assert cache.nbytes > 0


def test_the_window_and_the_sinks_change_the_output():
    """The sliding and sink cases above would pass vacuously if the feature did nothing at L = 9."""
    for case_id, attr in (("gpt_oss_sliding", "window"), ("mistral_window", "window"), ("gpt_oss_full", "sinks")):
        ours = from_hf_attention(hc.build(hc.CASES[hc.IDS.index(case_id)]))
        x = torch.randn(B, L, ours.embed_dim)
        with torch.no_grad():
            before, _ = ours(x)
            if attr == "window":
                ours.window = None
            else:
                ours.sinks = None
            after, _ = ours(x)
        assert (before - after).abs().max().item() > 1e-3, case_id


def test_sliding_layers_cache_only_the_window():
    ours = from_hf_attention(hc.build(hc.CASES[hc.IDS.index("gpt_oss_sliding")]))
    cache = ours.new_cache()
    with torch.no_grad():
        ours(torch.randn(1, 8, ours.embed_dim), cache=cache)
    assert cache.capacity == ours.window == 3


def test_weights_are_copies():
    src = hc.build(hc.CASES[hc.IDS.index("llama")])
    before = src.q_proj.weight.detach().clone()
    ours = from_hf_attention(src)
    with torch.no_grad():
        ours.q_proj.weight.add_(1.0)
    assert torch.equal(src.q_proj.weight, before)


def test_unsupported_class_names_itself_and_lists_the_supported():
    with pytest.raises(TypeError, match="Linear.*DeepseekV3Attention.*Gemma3Attention"):
        from_hf_attention(torch.nn.Linear(2, 2))
    assert {"DeepseekV3Attention", "DeepseekV2Attention", "Qwen3NextAttention", "DiffLlamaAttention", "GptOssAttention",
            "Gemma3Attention", "LlamaAttention", "Qwen3Attention", "MistralAttention"} <= set(SUPPORTED)


def test_length_dependent_rope_is_refused():
    case = ("llama_dynamic", "llama", dict(hc._LM, rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}), 0)
    with pytest.raises(ValueError, match="dynamic"):
        from_hf_attention(hc.build(case))
