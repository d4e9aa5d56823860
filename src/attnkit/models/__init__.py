"""attnkit.models: whole networks built from attnkit's attention, for the experiments and the course.

Names load their file on first use (``attnkit.models.resnet50``); ``from attnkit.models.vit import
VisionTransformer`` works as well.

=======================  =====================================================================
text                     BertModel, load_minilm, Seq2SeqRNN, Seq2SeqTransformer, ToyDecoder,
                         greedy_decode, beam_search
vision                   ResNet, resnet18, resnet34, resnet50, resnet_small, insert_attention,
                         VisionTransformer, vit_tiny, vit_b16
detection                YOLODetector, MHSAPlacement (YOLOv8-style, MHSA at P5/P4+P5/neck)
time series              create_forecaster (LSTM, LSTM + attention, Transformer, PatchTST-style,
                         DLinear, naive baselines)
=======================  =====================================================================
"""

from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS = {
    "BertModel": "bert",
    "BertConfig": "bert",
    "load_minilm": "bert_loader",
    "Seq2SeqRNN": "seq2seq_rnn",
    "Seq2SeqTransformer": "transformer",
    "ToyDecoder": "toy_decoder",
    "greedy_decode": "decoding",
    "beam_search": "decoding",
    "ResNet": "resnet",
    "resnet18": "resnet",
    "resnet34": "resnet",
    "resnet50": "resnet",
    "resnet_small": "resnet",
    "insert_attention": "insert_attention",
    "VisionTransformer": "vit",
    "vit_tiny": "vit",
    "vit_b16": "vit",
    "create_forecaster": "forecasters",
    "YOLODetector": "detection",
    "MHSAPlacement": "detection",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
