"""Hugging Face padding-free batches through attnkit: packed (B = 1) rows equal the sequences run one by one.

Tiny random-init decoders from their config classes (no downloads, :mod:`hf_tiny_models`), float64.
A padding-free batch reaches the attention function in two spellings: ``position_ids`` that restart
per sequence, or ``DataCollatorWithFlattening(return_flash_attn_kwargs=True)``'s ``cu_seq_lens_q/k``.
Both must route to :func:`attnkit.core.varlen.varlen_attention` (spied on: it really ran) and give the
logits, and the gradients, of transformers' own attention on each sequence alone: PyTorch's SDPA in
float64, or eager for Gemma 2, whose soft-capping SDPA lacks (eager takes its softmax in float32, so
it sits ~1e-7 from float64 math). A row whose
positions restart but that comes with a 2-D attention mask is not packed by transformers, so it must
not be packed by attnkit either.
"""

from __future__ import annotations

import os

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import hf_tiny_models as tm  # noqa: E402

from attnkit.integrations import hf as akhf  # noqa: E402
from attnkit.integrations import hf_packed  # noqa: E402

NAME = akhf.register()
ARCHS = {a.name: a for a in tm.ARCHS}
# the truth per architecture: transformers' sdpa in float64, or eager (softmax in float32) for Gemma 2
TRUTH = {"llama": "sdpa", "mistral": "sdpa", "qwen3": "sdpa", "gemma2": "eager"}
TOL = {"sdpa": 1e-10, "eager": 1e-6}
LENGTHS = [5, 3, 8, 1, 6]  # mistral / gemma2 have sliding_window=4: it binds inside the longer sequences


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny calls: one intra-op thread (tests/conftest.py)


@pytest.fixture
def varlen_calls(monkeypatch):
    calls = []
    real = hf_packed.varlen_attention

    def spy(*args, **kw):
        calls.append(args[3].tolist())
        return real(*args, **kw)

    monkeypatch.setattr(hf_packed, "varlen_attention", spy)
    return calls


def sequences():
    g = torch.Generator().manual_seed(1)
    return [torch.randint(4, tm.V, (n,), generator=g) for n in LENGTHS]


def models(arch, truth="sdpa"):
    """(truth model, attnkit model) in float64 with the same weights."""
    return tm.pair(arch, NAME, truth, dtype=torch.float64)


def one_by_one(model, seqs):
    return torch.cat([model(input_ids=s[None], use_cache=False).logits[0] for s in seqs])


def by_position_ids(seqs):
    return {
        "input_ids": torch.cat(seqs)[None],
        "position_ids": torch.cat([torch.arange(len(s)) for s in seqs])[None],
        "use_cache": False,  # transformers packs by position_ids only without a cache
    }


def by_collator(seqs):
    batch = transformers.DataCollatorWithFlattening(return_flash_attn_kwargs=True)([{"input_ids": s.tolist()} for s in seqs])
    batch.pop("labels")
    return batch


@pytest.mark.parametrize("spelling", [by_position_ids, by_collator], ids=["position_ids", "cu_seq_lens"])
@pytest.mark.parametrize("arch", list(TRUTH))
def test_packed_row_equals_sequences_alone(arch, spelling, varlen_calls):
    eager, ours = models(ARCHS[arch], TRUTH[arch])
    seqs = sequences()
    with torch.no_grad():
        want = one_by_one(eager, seqs)
        varlen_calls.clear()
        got = ours(**spelling(seqs)).logits[0]
    cu = torch.tensor([0, *LENGTHS]).cumsum(0).tolist()
    assert varlen_calls and all(c == cu for c in varlen_calls)  # every layer ran packed
    torch.testing.assert_close(got, want, rtol=0, atol=TOL[TRUTH[arch]])


def test_packed_gradients_equal_sequences_alone(varlen_calls):
    eager, ours = models(ARCHS["llama"])
    seqs = sequences()
    packed = ours(**by_collator(seqs)).logits[0]
    g_ours = torch.autograd.grad(packed.square().sum(), list(ours.parameters()))
    alone = one_by_one(eager, seqs)
    g_eager = torch.autograd.grad(alone.square().sum(), list(eager.parameters()))
    assert varlen_calls
    for a, b in zip(g_ours, g_eager):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-9)


def test_restarting_positions_with_a_2d_mask_are_not_packed(varlen_calls):
    """transformers packs by position_ids only when no 2-D mask is given; attnkit follows, as sdpa does."""
    eager, ours = models(ARCHS["llama"])
    kw = by_position_ids(sequences())
    kw["attention_mask"] = torch.ones_like(kw["input_ids"])
    with torch.no_grad():
        want = eager(**kw).logits[0]
        got = ours(**kw).logits[0]
    assert not varlen_calls
    torch.testing.assert_close(got, want, rtol=0, atol=1e-10)


def test_cu_seq_lens_need_one_row():
    _, ours = models(ARCHS["llama"])
    ids = torch.randint(4, tm.V, (2, 6))
    cu = torch.tensor([0, 2, 6], dtype=torch.int32)
    with pytest.raises(ValueError, match="one row \\(B=1\\)"):
        ours(input_ids=ids, cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=4, max_length_k=4, use_cache=False)


def test_left_padded_single_row_is_not_packed(varlen_calls):
    """generate()-style positions of a left-padded row also "restart" (1 1 0 1 2 ...): padding, not packing."""
    ref, ours = models(ARCHS["llama"])
    ids = torch.randint(4, tm.V, (1, 7), generator=torch.Generator().manual_seed(2))
    am = torch.tensor([[0, 0, 1, 1, 1, 1, 1]])
    pos = (am.cumsum(-1) - 1).clamp(min=0).masked_fill(am == 0, 1)
    with torch.no_grad():
        want = ref(input_ids=ids, attention_mask=am, position_ids=pos, use_cache=False).logits[0, 2:]
        got = ours(input_ids=ids, attention_mask=am, position_ids=pos, use_cache=False).logits[0, 2:]
    assert not varlen_calls
    torch.testing.assert_close(got, want, rtol=0, atol=1e-10)
