"""attnkit.integrations.hf.SinkCache on a tiny random Llama: every step's logits equal the model run
fresh on the kept tokens at positions 0..n-1, in a manual loop and in ``generate``; the cache
never holds more than sinks + window.

One decoder layer: there a token's key and value depend on the token alone, so "the model run fresh
on the kept tokens" is exactly what the cache must reproduce. In deeper layers a kept token's key
was computed from its whole history when it was first read, which a fresh run cannot see (true of
StreamingLLM itself). Tolerance: the model computes cos/sin in float32, so un-rotating and rotating
again costs ~1e-7 relative even in float64."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from attnkit.integrations.hf import SinkCache  # noqa: E402

SINKS, WINDOW = 2, 6


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    cfg = transformers.AutoConfig.for_model("llama", hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                                            num_key_value_heads=2, vocab_size=50, max_position_embeddings=256)
    return transformers.AutoModelForCausalLM.from_config(cfg).double().eval()


def _kept(tokens: list[int]) -> list[int]:
    return tokens if len(tokens) <= SINKS + WINDOW else tokens[:SINKS] + tokens[-WINDOW:]


def _fresh(model, tokens):
    return model(torch.tensor([tokens])).logits[0, -1]


@torch.no_grad()
def test_each_step_equals_fresh_run_on_kept_tokens(model):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 50, (30,), generator=g).tolist()
    cache = SinkCache(SINKS, WINDOW, config=model.config)
    out = model(torch.tensor([ids[:3]]), cache=cache, use_cache=True)  # a 3-token prompt, then one at a time
    torch.testing.assert_close(out.logits[0, -1], _fresh(model, ids[:3]), atol=1e-6, rtol=1e-6)
    for t in range(3, len(ids)):
        out = model(torch.tensor([[ids[t]]]), cache=cache, use_cache=True)
        torch.testing.assert_close(out.logits[0, -1], _fresh(model, _kept(ids[: t + 1])), atol=1e-6, rtol=1e-6)
        assert all(layer.keys.shape[-2] <= SINKS + WINDOW for layer in cache.layers)


@torch.no_grad()
def test_generate_uses_the_position_rule(model):
    prompt = [3, 14, 15, 9, 2]
    cache = SinkCache(SINKS, WINDOW, config=model.config)
    got = model.generate(torch.tensor([prompt]), cache=cache, max_new_tokens=20, do_sample=False)[0].tolist()
    seq = list(prompt)  # the reference: greedy, each token from a fresh run on the kept tokens
    for _ in range(20):
        seq.append(int(_fresh(model, _kept(seq)).argmax()))
    assert got == seq
    assert max(layer.keys.shape[-2] for layer in cache.layers) <= SINKS + WINDOW


def test_bad_sizes_name_the_argument(model):
    with pytest.raises(ValueError, match="sinks"):
        SinkCache(-1, 4, config=model.config)
    with pytest.raises(ValueError, match="window"):
        SinkCache(4, 0, config=model.config)
