"""Whole tiny DeepSeek-V3 (MLA, MoE) and Qwen3-Next (gated attention beside linear attention) models
generate the same 32 greedy tokens through the attnkit bridge (``attn_implementation="attnkit"``)
as with transformers' eager attention, cache included."""

from __future__ import annotations

import os

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from attnkit.integrations import hf as akhf  # noqa: E402

NAME = akhf.register()
pytestmark = pytest.mark.usefixtures("one_thread")
_BASE = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=99,
             max_position_embeddings=128, pad_token_id=1, bos_token_id=0, eos_token_id=2)
MODELS = {
    "deepseek_v3": dict(_BASE, num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4,
                        v_head_dim=6, moe_intermediate_size=16, n_routed_experts=4, num_experts_per_tok=2, n_group=1,
                        topk_group=1, first_k_dense_replace=1, experts_implementation="eager"),
    "qwen3_next": dict(_BASE, num_key_value_heads=2, head_dim=8, partial_rotary_factor=0.5, linear_num_key_heads=2,
                       linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8, moe_intermediate_size=16,
                       shared_expert_intermediate_size=16, num_experts=4, num_experts_per_tok=2,
                       layer_types=["linear_attention", "full_attention"], experts_implementation="eager"),
}


def _model(kind: str, impl: str):
    cfg = transformers.AutoConfig.for_model(kind, **MODELS[kind])
    cfg._attn_implementation = impl
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(cfg).eval()


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_32_greedy_tokens_equal_eager(kind):
    eager, ours = _model(kind, "eager"), _model(kind, NAME)
    ours.load_state_dict(eager.state_dict())
    ids = torch.randint(4, 99, (2, 5), generator=torch.Generator().manual_seed(1))
    kw = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=1)
    with torch.no_grad():
        want = eager.generate(ids, **kw)
        got = ours.generate(ids, **kw)
        logits_e, logits_o = eager(want).logits, ours(want).logits
    assert ours.config._attn_implementation == NAME and eager.config._attn_implementation == "eager"
    assert want.shape == (2, 37) and len(set(want[0, 5:].tolist())) > 3  # a varied continuation, not one repeated token
    assert torch.equal(got, want)
    assert (logits_e - logits_o).abs().max().item() < 1e-4
