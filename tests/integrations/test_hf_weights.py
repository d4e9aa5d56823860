"""Falcon's ``output_attentions`` reaches attnkit through the layer's own arguments, whatever wraps
the registered attention function.

Falcon's attention layer takes ``output_attentions`` and never passes it to the attention
function; it returns whatever weights the function gave. attnkit learns the flag from forward hooks
on the layers (:mod:`attnkit.integrations.hf_weights`), so wrapping the registered function — as a
profiler, a logging shim or a user's patch does — must not empty the maps. The maps are compared
with transformers' eager ones; the flag stack is empty after each forward, also one that raised.
"""

from __future__ import annotations

import os

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import hf_tiny_models as tm  # noqa: E402
from transformers import AttentionInterface  # noqa: E402
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS  # noqa: E402

from attnkit.integrations import hf as akhf  # noqa: E402
from attnkit.integrations import hf_weights  # noqa: E402

WRAPPED = akhf.register("attnkit_wrapped")
_INNER = ALL_ATTENTION_FUNCTIONS[WRAPPED]
CALLS: list[dict] = []


def _trivial_wrapper(module, query, key, value, attention_mask, **kwargs):
    """What any shim around an attention function looks like: it passes everything through."""
    CALLS.append(kwargs)
    return _INNER(module, query, key, value, attention_mask, **kwargs)


AttentionInterface.register(WRAPPED, _trivial_wrapper)


def _falcon(arch_name: str, **kw):
    arch = tm.BY_NAME[arch_name]
    eager, ours = tm.pair(arch, WRAPPED)
    x = arch.inputs()
    with torch.no_grad():
        CALLS.clear()
        mine = ours(**x, **kw)
        theirs = eager(**x, **kw)
    return arch, mine, theirs


@pytest.mark.parametrize("name", ["falcon", "falcon_alibi"])
def test_falcon_maps_come_back_through_a_wrapped_attention_function(name):
    arch, mine, theirs = _falcon(name, output_attentions=True)
    assert CALLS and all("output_attentions" not in kw for kw in CALLS), "Falcon passes the flag down now: the test shows nothing"
    assert len(mine.attentions) == len(theirs.attentions) == 2
    rows = arch.real_queries()[:, None, :, None]
    for ours_w, eager_w in zip(mine.attentions, theirs.attentions):
        assert ours_w is not None, "the wrapped attention function returned no weights"
        r = rows.expand(eager_w.shape)
        torch.testing.assert_close(ours_w[r], eager_w[r], rtol=1e-5, atol=1e-6)
    assert hf_weights._FLAGS.get() == ()


def test_falcon_returns_no_maps_unless_asked():
    _, mine, _ = _falcon("falcon")
    assert mine.attentions is None
    _, mine, _ = _falcon("falcon", output_attentions=False)
    assert mine.attentions is None


def test_a_forward_that_raises_leaves_no_flag_behind():
    arch = tm.BY_NAME["falcon"]
    _, ours = tm.pair(arch, WRAPPED)
    x = arch.inputs()
    x["input_ids"] = x["input_ids"].clone()
    x["input_ids"][0, 0] = 10**6  # out of the vocabulary: the embedding raises mid-forward
    with pytest.raises(IndexError):
        ours(**x, output_attentions=True)
    assert hf_weights._FLAGS.get() == ()
    assert not hf_weights.layer_wants_weights()


def test_gradient_checkpoint_recomputation_sees_the_flag():
    """Training with checkpointed layers recomputes each layer in the backward, outside the model's
    forward: the layer's own hooks give the flag again, so the recomputation saves the same tensors
    (a mismatch is a CheckpointError) and the gradients match eager's, within 4× eager's own float32
    error against eager in float64."""
    arch = tm.BY_NAME["falcon"]
    eager, ours = tm.pair(arch, WRAPPED)
    truth = arch.build("eager", eager.state_dict()).double()
    x = arch.inputs()
    grads = []
    for m, inputs in ((eager, x), (ours, x), (truth, {k: v.double() if v.is_floating_point() else v for k, v in x.items()})):
        m.train()
        m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        out = m(**inputs, output_attentions=True, use_cache=False)
        assert all(a is not None for a in out.attentions)
        (out.logits.sum() + sum(a.sum() for a in out.attentions)).backward()
        grads.append(torch.cat([p.grad.double().flatten() for p in m.parameters()]))
    eager_err = (grads[0] - grads[2]).abs().max().item()
    our_err = (grads[1] - grads[2]).abs().max().item()
    assert our_err <= 4 * eager_err + 1e-6, f"attnkit {our_err:.3g} vs float64, eager {eager_err:.3g}"
    assert hf_weights._FLAGS.get() == ()
