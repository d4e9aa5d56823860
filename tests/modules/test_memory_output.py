"""Every "query over memory" module (Bahdanau, Luong, temporal attention) returns one type,
:class:`MemoryAttentionOutput` ``(context, weights)``, for a one-step query (B, D) and a sequence of
queries (B, T, D) alike; the context is the weights times the memory rows, and tuple unpacking works."""

from __future__ import annotations

import pytest
import torch

from attnkit.modules import BahdanauAttention, LuongAttention, MemoryAttentionOutput, TemporalAttention
from attnkit.modules.temporal_attention import TemporalAttentionOutput

D, S, B, T = 8, 5, 3, 4


@pytest.mark.parametrize("make", [lambda: BahdanauAttention(D), lambda: LuongAttention(D), lambda: TemporalAttention(D, D)],
                         ids=["bahdanau", "luong", "temporal"])
@pytest.mark.parametrize("query_shape", [(B, D), (B, T, D)], ids=["one_step", "sequence"])
def test_one_output_type_whose_context_is_weights_times_memory(make, query_shape):
    torch.manual_seed(0)
    module, memory = make().double(), torch.randn(B, S, D, dtype=torch.float64)
    valid = torch.ones(B, S, dtype=torch.bool)
    valid[0, 3:] = False
    out = module(torch.randn(*query_shape, dtype=torch.float64), memory, valid)
    assert type(out) is MemoryAttentionOutput
    context, weights = out
    assert context.shape == query_shape and weights.shape == query_shape[:-1] + (S,)
    w = weights if weights.dim() == 3 else weights[:, None]
    ref = (w @ memory).reshape(context.shape)  # the definition, in float64
    torch.testing.assert_close(context, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(weights.sum(-1), torch.ones(query_shape[:-1], dtype=torch.float64))
    assert (weights[0, ..., 3:] == 0).all()


def test_the_temporal_name_is_the_shared_type():
    assert TemporalAttentionOutput is MemoryAttentionOutput
