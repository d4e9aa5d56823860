"""Tiny random-init transformers models, built from their config classes (no downloads), with inputs.

Every model has 2 layers, width 32 and 4 heads (GQA where the architecture has it), so one forward
takes milliseconds. Each :class:`Arch` knows how to build a padded batch for its model: padded on the
right (so no query row is left without a key: eager turns such rows into NaN in float64 for OPT),
or on the left for decoders that generate; vision models take no mask.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import transformers as T

V = 99  # vocabulary size
B, N = 2, 7  # batch, tokens per row; row 1 has PAD fewer real tokens
PAD = 3


@dataclass(frozen=True)
class Arch:
    name: str
    config: Callable[[str], object]  # attn_implementation -> config
    model: type
    kind: str  # "encoder" | "decoder" | "seq2seq" | "vision" | "audio"
    float64: bool = True  # False: the model casts to float32 inside, so eager in float64 cannot be the truth

    def build(self, impl: str, state=None):
        torch.manual_seed(0)
        m = self.model(self.config(impl)).eval()
        if state is not None:
            m.load_state_dict(state)
        return m

    def inputs(self, dtype=torch.float32, left: bool = False) -> dict:
        g = torch.Generator().manual_seed(1)
        if self.kind == "vision":
            return {"pixel_values": torch.randn(B, 3, 16, 16, generator=g, dtype=dtype)}
        ids = torch.randint(4, V, (B, N), generator=g)
        real = torch.ones(B, N, dtype=torch.long)
        if left:
            real[1, :PAD] = 0
        else:
            real[1, N - PAD:] = 0  # right padding
        ids = ids.masked_fill(real == 0, 1)
        if self.kind == "audio":
            feats = torch.randn(B, 8, 32, generator=g, dtype=dtype)
            return {"input_features": feats, "decoder_input_ids": ids, "decoder_attention_mask": real}
        kw = {"input_ids": ids, "attention_mask": real}
        if self.kind == "seq2seq":
            dec = torch.randint(4, V, (B, 5), generator=g)
            kw.update(decoder_input_ids=dec)
        return kw

    def real_queries(self, left: bool = False) -> torch.Tensor | None:
        """(B, L) bool: the query rows whose outputs are defined (padding rows differ by design)."""
        if self.kind in ("vision", "seq2seq"):
            return None  # seq2seq: the decoder side (the output) has no padding
        return self.inputs(left=left)["decoder_attention_mask" if self.kind == "audio" else "attention_mask"].bool()


def _lm(**kw):
    base = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                vocab_size=V, max_position_embeddings=64, pad_token_id=1, bos_token_id=0, eos_token_id=2)
    base.update(kw)
    return base


def _cfg(cls, **kw):
    return lambda impl: cls(**kw, attn_implementation=impl)


_ENC = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=V,
            max_position_embeddings=64, pad_token_id=1)
_VIS = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=16,
            patch_size=4, num_channels=3)
_S2S = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
            encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=V, max_position_embeddings=64, pad_token_id=1,
            bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)

ARCHS = [
    Arch("bert", _cfg(T.BertConfig, **_ENC), T.BertModel, "encoder"),
    Arch("roberta", _cfg(T.RobertaConfig, **_ENC), T.RobertaModel, "encoder"),
    Arch("distilbert", _cfg(T.DistilBertConfig, dim=32, hidden_dim=64, n_layers=2, n_heads=4, vocab_size=V,
                            pad_token_id=1), T.DistilBertModel, "encoder"),
    Arch("clip_text", _cfg(T.CLIPTextConfig, **{**_ENC, "pad_token_id": 1, "eos_token_id": 2}),
         T.CLIPTextModel, "encoder"),
    Arch("vit", _cfg(T.ViTConfig, **_VIS), T.ViTModel, "vision"),
    Arch("siglip", _cfg(T.SiglipVisionConfig, **_VIS), T.SiglipVisionModel, "vision"),
    Arch("gpt2", _cfg(T.GPT2Config, n_embd=32, n_layer=2, n_head=4, vocab_size=V, n_positions=64, bos_token_id=0,
                      eos_token_id=2, pad_token_id=1), T.GPT2LMHeadModel, "decoder"),
    Arch("opt", _cfg(T.OPTConfig, hidden_size=32, ffn_dim=64, num_hidden_layers=2, num_attention_heads=4,
                     vocab_size=V, word_embed_proj_dim=32, max_position_embeddings=64, pad_token_id=1,
                     bos_token_id=0, eos_token_id=2), T.OPTForCausalLM, "decoder"),
    Arch("llama", _cfg(T.LlamaConfig, **_lm(num_key_value_heads=2)), T.LlamaForCausalLM, "decoder"),
    Arch("mistral", _cfg(T.MistralConfig, **_lm(num_key_value_heads=2, sliding_window=4)),
         T.MistralForCausalLM, "decoder"),
    Arch("qwen2", _cfg(T.Qwen2Config, **_lm(num_key_value_heads=2)), T.Qwen2ForCausalLM, "decoder"),
    Arch("gemma", _cfg(T.GemmaConfig, **_lm(num_key_value_heads=1, head_dim=8)), T.GemmaForCausalLM, "decoder"),
    Arch("gemma2", _cfg(T.Gemma2Config, **_lm(num_key_value_heads=2, head_dim=8, sliding_window=4,
                                             attn_logit_softcapping=2.0, query_pre_attn_scalar=8)),
         T.Gemma2ForCausalLM, "decoder"),
    Arch("phi3", _cfg(T.Phi3Config, **_lm(num_key_value_heads=2)), T.Phi3ForCausalLM, "decoder"),
    Arch("falcon", _cfg(T.FalconConfig, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, vocab_size=V,
                        pad_token_id=1, bos_token_id=0, eos_token_id=2), T.FalconForCausalLM, "decoder"),
    Arch("falcon_alibi", _cfg(T.FalconConfig, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                              vocab_size=V, alibi=True, pad_token_id=1, bos_token_id=0, eos_token_id=2),
         T.FalconForCausalLM, "decoder"),
    Arch("t5", _cfg(T.T5Config, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, vocab_size=V,
                    decoder_start_token_id=0, pad_token_id=1, eos_token_id=2), T.T5ForConditionalGeneration, "seq2seq"),
    Arch("bart", _cfg(T.BartConfig, **_S2S), T.BartForConditionalGeneration, "seq2seq"),
    Arch("whisper", _cfg(T.WhisperConfig, **{**_S2S, "num_mel_bins": 8, "max_source_positions": 16,
                                            "max_target_positions": 64, "decoder_start_token_id": 0}),
         T.WhisperForConditionalGeneration, "audio"),
]
ARCHS += [  # a second round: more of what people load (window/softcap mixes, MoE, relative biases, MQA)
    Arch("xlm_roberta", _cfg(T.XLMRobertaConfig, **_ENC), T.XLMRobertaModel, "encoder"),
    Arch("electra", _cfg(T.ElectraConfig, **_ENC, embedding_size=16), T.ElectraModel, "encoder"),
    Arch("albert", _cfg(T.AlbertConfig, **_ENC, embedding_size=16), T.AlbertModel, "encoder"),
    Arch("esm", _cfg(T.EsmConfig, **_ENC, mask_token_id=4), T.EsmModel, "encoder"),
    Arch("modernbert", _cfg(T.ModernBertConfig, **{**_ENC, "bos_token_id": 0, "eos_token_id": 2, "cls_token_id": 0,
                                                   "sep_token_id": 2}, local_attention=4,
                            global_attn_every_n_layers=2), T.ModernBertModel, "encoder"),
    Arch("deit", _cfg(T.DeiTConfig, **_VIS), T.DeiTModel, "vision"),
    Arch("beit", _cfg(T.BeitConfig, **_VIS, use_relative_position_bias=True), T.BeitModel, "vision"),
    Arch("clip_vision", _cfg(T.CLIPVisionConfig, **_VIS), T.CLIPVisionModel, "vision"),
    Arch("gemma3", _cfg(T.Gemma3TextConfig, **_lm(num_key_value_heads=2, head_dim=8, sliding_window=4,
                                                 query_pre_attn_scalar=8, attn_logit_softcapping=2.0,
                                                 layer_types=["sliding_attention", "full_attention"])),
         T.Gemma3ForCausalLM, "decoder"),
    Arch("qwen3", _cfg(T.Qwen3Config, **_lm(num_key_value_heads=2, head_dim=8)), T.Qwen3ForCausalLM, "decoder"),
    Arch("phi", _cfg(T.PhiConfig, **_lm()), T.PhiForCausalLM, "decoder"),
    Arch("gpt_neox", _cfg(T.GPTNeoXConfig, **_lm()), T.GPTNeoXForCausalLM, "decoder"),
    Arch("gptj", _cfg(T.GPTJConfig, n_embd=32, n_layer=2, n_head=4, rotary_dim=4, vocab_size=V, n_positions=64,
                      bos_token_id=0, eos_token_id=2, pad_token_id=1), T.GPTJForCausalLM, "decoder"),
    Arch("gpt_bigcode", _cfg(T.GPTBigCodeConfig, n_embd=32, n_layer=2, n_head=4, vocab_size=V, n_positions=64,
                             multi_query=True, bos_token_id=0, eos_token_id=2, pad_token_id=1),
         T.GPTBigCodeForCausalLM, "decoder"),
    Arch("mixtral", _cfg(T.MixtralConfig, **_lm(num_key_value_heads=2, num_local_experts=2, num_experts_per_tok=1,
                                                 experts_implementation="eager")),  # grouped_mm has no float64
         T.MixtralForCausalLM, "decoder"),
    Arch("starcoder2", _cfg(T.Starcoder2Config, **_lm(num_key_value_heads=2, sliding_window=4)),
         T.Starcoder2ForCausalLM, "decoder"),
    Arch("biogpt", _cfg(T.BioGptConfig, **_lm()), T.BioGptForCausalLM, "decoder"),
    Arch("mt5", _cfg(T.MT5Config, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, vocab_size=V,
                     decoder_start_token_id=0, pad_token_id=1, eos_token_id=2), T.MT5ForConditionalGeneration,
         "seq2seq"),
    Arch("mbart", _cfg(T.MBartConfig, **_S2S), T.MBartForConditionalGeneration, "seq2seq"),
    Arch("marian", _cfg(T.MarianConfig, **_S2S), T.MarianMTModel, "seq2seq"),
    Arch("m2m100", _cfg(T.M2M100Config, **_S2S), T.M2M100ForConditionalGeneration, "seq2seq"),
]
ARCHS += [  # attention sinks: one extra logit per (query, head) with a zero value
    Arch("gpt_oss", _cfg(T.GptOssConfig, **_lm(num_key_value_heads=2, head_dim=8, intermediate_size=32,
                                               num_local_experts=2, num_experts_per_tok=1, sliding_window=4,
                                               layer_types=["sliding_attention", "full_attention"],
                                               experts_implementation="eager")),
         T.GptOssForCausalLM, "decoder"),
    Arch("inkling2", _cfg(T.Inkling2TextConfig, **_lm(num_key_value_heads=2, head_dim=8, swa_num_attention_heads=4,
                                                      swa_num_key_value_heads=2, swa_head_dim=8, sliding_window_size=4,
                                                      rel_extent=8, d_rel=4, moe_intermediate_size=16,
                                                      n_routed_experts=4, num_experts_per_tok=2, unpadded_vocab_size=V,
                                                      n_layers_per_attn_res_block=2, experts_implementation="eager")),
         T.Inkling2ForCausalLM, "decoder", float64=False),
]
BY_NAME = {a.name: a for a in ARCHS}


def reference(arch: Arch, truth: str = "eager", *, dtype: torch.dtype | None = None,
              prepare: Callable[[torch.nn.Module], None] | None = None) -> torch.nn.Module:
    """``arch`` under transformers' attention implementation ``truth`` ("eager", "sdpa"), cast to
    ``dtype`` (float64 for comparisons near exact), then ``prepare(model)`` (under no_grad) edits its
    weights, e.g. to make the feature under test matter."""
    model = arch.build(truth)
    if dtype is not None:
        model = model.to(dtype)
    if prepare is not None:
        with torch.no_grad():
            prepare(model)
    return model


def pair(arch: Arch, impl: str, truth: str = "eager", *, dtype: torch.dtype | None = None,
         prepare: Callable[[torch.nn.Module], None] | None = None):
    """(:func:`reference` model, ``impl`` model) with the same weights, both in ``dtype``: the weights
    are copied after the cast, so none is rounded through float32."""
    ref = reference(arch, truth, dtype=dtype, prepare=prepare)
    ours = arch.build(impl)
    if dtype is not None:
        ours = ours.to(dtype)
    ours.load_state_dict(ref.state_dict())
    return ref, ours


def main_output(out) -> torch.Tensor:
    return out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state
