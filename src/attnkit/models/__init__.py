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

import importlib

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

# A name equal to its file name must be bound eagerly: importing the submodule anywhere (e.g.
# ``import attnkit.models.insert_attention``) sets the package attribute to the *module*, and ``__getattr__``
# is never asked again, so the public name would silently become the module.
for _name, _file in _EXPORTS.items():
    if _name == _file:
        globals()[_name] = getattr(importlib.import_module(f".{_file}", __name__), _name)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'attnkit.models' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
