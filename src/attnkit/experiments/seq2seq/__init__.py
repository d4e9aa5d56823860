"""The seq2seq bottleneck: a recurrent encoder-decoder without attention, with Bahdanau's and
Luong's attention, and a Transformer of the same size, scored per source-length bucket.

data: the data sets and tokenizers · models: the four models at one parameter budget · train: the
experiment · evaluate: decoding and scores · plots: the figures · section: the report's prose (en, zh).
"""

from .train import Seq2SeqExperiment

__all__ = ["Seq2SeqExperiment"]
