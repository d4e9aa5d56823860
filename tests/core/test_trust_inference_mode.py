"""``torch.enable_grad()`` inside ``torch.inference_mode()``: found by running the whole suite under
inference mode (``pytest --inference-mode``). torch's own ops record no graph there, so plain
attention runs; the fused SDPA and blockwise backends' ``autograd.Function`` tried to save inference
tensors for a backward ("Inference tensors cannot be saved for backward") and the sinks' check asked
for an lse with gradients. Every backend now gives the no_grad answer there.

Shape legend: q, k, v (B, H, L, E); sinks (H,).
"""

from __future__ import annotations

import pytest
import torch

import attnkit
from attnkit import masks

CASES = {
    "causal": dict(mask=masks.causal()),
    "padding": dict(mask=masks.padding_mask([5, 8], 8)),
    "sinks": dict(sinks=torch.tensor([0.5, -1.0])),
}


@pytest.mark.parametrize("backend", ["reference", "sdpa", "blockwise", "auto"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_grad_mode_inside_inference_mode_gives_the_no_grad_answer(backend, case):
    g = torch.Generator().manual_seed(0)
    qkv = [torch.randn(2, 2, 8, 4, generator=g) for _ in range(3)]
    with torch.no_grad():
        want = attnkit.attention(*qkv, backend="reference", **CASES[case]).out
    with torch.inference_mode(), torch.enable_grad():
        q, k, v = (t.clone().requires_grad_() for t in qkv)
        got = attnkit.attention(q, k, v, backend=backend, **CASES[case])
    assert got.out.grad_fn is None
    torch.testing.assert_close(got.out, want, rtol=1e-5, atol=1e-6)


def test_a_later_training_call_still_records_its_graph():
    """The no_grad applies to the call under inference mode only: the next call in grad mode trains."""
    q, k, v = (torch.randn(1, 2, 8, 4, requires_grad=True) for _ in range(3))
    with torch.inference_mode(), torch.enable_grad():
        attnkit.attention(q.detach().clone(), k.detach().clone(), v.detach().clone(), mask=masks.causal())
    out = attnkit.attention(q, k, v, mask=masks.causal()).out
    out.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()
