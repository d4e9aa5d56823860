"""gpt-oss's attention sinks and Gemma 2's logit soft-capping through attnkit, against transformers' eager.

Tiny models from their config classes (no downloads, :mod:`hf_tiny_models`): gpt-oss (2 layers, 2
experts, a sliding-window and a full-attention layer, one learned sink per head) and Gemma 2
(``attn_logit_softcapping`` and a sliding window). The bridge must hand the sinks to
``attnkit.attention(sinks=...)`` and the cap to ``attnkit.biases.softcap`` (the core features, not a
copy of their math); logits and every gradient, the sinks' included, equal eager's in float64 on
each backend that serves the calls; and five SGD steps of gpt-oss with learned sinks follow eager's
run step for step.
"""

from __future__ import annotations

import os

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import hf_tiny_models as tm  # noqa: E402

from attnkit import biases as Bi  # noqa: E402
from attnkit.integrations import hf as akhf  # noqa: E402

BACKENDS = ["auto", "reference", "blockwise"]
GEMMA_QK_GAIN = 12.0  # random init gives logits ~1e-2, which a cap of 2 leaves alone
# eager's own gap to float64: gpt-oss takes its softmax in the input dtype (float64 here); Gemma 2 in
# float32 (``softmax(..., dtype=torch.float32)``), so it sits ~1e-7 from a float64 computation
TOL = {"gpt_oss": 1e-12, "gemma2": 1e-6}
NAMES = {b: akhf.register(f"attnkit_sinks_{b}", backend=b) for b in BACKENDS}


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny calls: one intra-op thread (tests/conftest.py)


@pytest.fixture
def seen(monkeypatch):
    """Every call the bridge makes to attnkit.attention, as (bias, sinks) pairs."""
    calls = []
    real = akhf.attention

    def spy(*a, **kw):
        calls.append((kw.get("bias"), kw.get("sinks")))
        return real(*a, **kw)

    monkeypatch.setattr(akhf, "attention", spy)
    return calls


def _feature_matters(eager) -> None:
    """Weights that make the feature under test matter: gpt-oss's sinks drawn at the scale of its
    logits, Gemma 2's query and key projections scaled so logits pass the cap."""
    g = torch.Generator().manual_seed(5)
    for layer in eager.model.layers:
        attn = layer.self_attn
        if hasattr(attn, "sinks"):
            attn.sinks.copy_(torch.randn(attn.sinks.shape, generator=g, dtype=attn.sinks.dtype) * 2)
        if getattr(attn, "attn_logit_softcapping", None) is not None:
            attn.q_proj.weight.mul_(GEMMA_QK_GAIN)
            attn.k_proj.weight.mul_(GEMMA_QK_GAIN)


def _eager(arch_name: str):
    """(arch, the float64 eager model, :func:`_feature_matters`)."""
    arch = tm.BY_NAME[arch_name]
    return arch, tm.reference(arch, dtype=torch.float64, prepare=_feature_matters)


def _pair(arch_name: str, backend: str):
    """(arch, eager, attnkit) float64 models with the same weights (:func:`_eager`)."""
    arch = tm.BY_NAME[arch_name]
    return (arch, *tm.pair(arch, NAMES[backend], dtype=torch.float64, prepare=_feature_matters))


def _loss_and_grads(model, x, rows):
    params = [p for p in model.parameters() if p.requires_grad]
    logits = model(**x).logits
    w = torch.randn(logits.shape, generator=torch.Generator().manual_seed(2), dtype=logits.dtype)
    loss = (logits * w)[rows].sum()
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    named = [n for n, p in model.named_parameters() if p.requires_grad]
    return logits.detach(), {n: torch.zeros_like(p) if g is None else g for n, p, g in zip(named, params, grads)}


def _assert_equal_to_eager(arch_name: str, backend: str):
    arch, eager, ours = _pair(arch_name, backend)
    x = arch.inputs()
    rows = arch.real_queries()
    theirs, g_theirs = _loss_and_grads(eager, x, rows)
    mine, g_mine = _loss_and_grads(ours, x, rows)
    scale = theirs[rows].abs().max().item()
    assert (mine - theirs)[rows].abs().max().item() <= TOL[arch_name] * scale
    top = max(g.abs().max().item() for g in g_theirs.values())
    worst = {n: (g_mine[n] - g).abs().max().item() / top for n, g in g_theirs.items()}
    assert max(worst.values()) <= TOL[arch_name], max(worst.items(), key=lambda t: t[1])
    return arch, eager, g_theirs, g_mine


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpt_oss_logits_and_gradients_equal_eager_sinks_included(backend, seen):
    arch, eager, g_theirs, g_mine = _assert_equal_to_eager("gpt_oss", backend)
    sink_grads = [n for n in g_theirs if n.endswith("self_attn.sinks")]
    assert len(sink_grads) == 2
    for n in sink_grads:
        assert g_theirs[n].abs().min().item() > 0  # every head's sink gets a gradient, and it is eager's
    # the sinks went to attnkit.attention as its sinks= argument, (H,) per layer
    assert len(seen) == 2 and all(s is not None and s.shape == (4,) for _, s in seen)


def test_gpt_oss_sinks_matter_in_this_test():
    # guard against a vacuous comparison: the same model with its sinks at -30 (almost no sink) differs clearly
    arch, eager = _eager("gpt_oss")
    x = arch.inputs()
    rows = arch.real_queries()
    with torch.no_grad():
        base = eager(**x).logits
        for layer in eager.model.layers:
            layer.self_attn.sinks.fill_(-30.0)
        off = eager(**x).logits
    assert (base - off)[rows].abs().max().item() > 1e-2


@pytest.mark.parametrize("backend", BACKENDS)
def test_gemma2_softcap_and_window_equal_eager(backend, seen):
    _assert_equal_to_eager("gemma2", backend)
    # the bridge passed Gemma 2's cap as attnkit's softcap, with its value
    caps = [b for b, _ in seen]
    assert len(caps) == 2 and all(isinstance(b, Bi.SoftCap) and b.cap == 2.0 for b in caps)


def test_gemma2_cap_matters_in_this_test():
    arch, eager = _eager("gemma2")
    x = arch.inputs()
    rows = arch.real_queries()
    with torch.no_grad():
        base = eager(**x).logits
        for layer in eager.model.layers:
            layer.self_attn.config.attn_logit_softcapping = None
            layer.self_attn.attn_logit_softcapping = None
        uncapped = eager(**x).logits
    assert (base - uncapped)[rows].abs().max().item() > 1e-2


def _train(model, x, labels, steps=5, lr=0.5):
    """Plain SGD on the causal-LM loss; returns the loss of every step."""
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = model(**x, labels=labels).loss
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("backend", ["auto", "blockwise"])
def test_gpt_oss_training_run_equals_eager(backend):
    arch, eager, ours = _pair("gpt_oss", backend)
    x = arch.inputs()
    labels = x["input_ids"].masked_fill(x["attention_mask"] == 0, -100)  # no loss on padding
    before = {n: p.detach().clone() for n, p in eager.named_parameters()}
    theirs = _train(eager, x, labels)
    mine = _train(ours, x, labels)
    assert theirs[-1] < theirs[0]  # it learns
    for a, b in zip(mine, theirs):
        assert abs(a - b) <= 1e-12 * abs(b), (mine, theirs)
    p_theirs = dict(eager.named_parameters())
    for n, p in ours.named_parameters():
        assert (p - p_theirs[n]).abs().max().item() <= 1e-12, n
    for layer in ("model.layers.0.self_attn.sinks", "model.layers.1.self_attn.sinks"):
        moved = (p_theirs[layer] - before[layer]).abs().max().item()
        assert moved > 1e-4, f"{layer} did not learn ({moved:.3g})"
