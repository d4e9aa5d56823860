"""Bad arguments fail fast with a clear error, before any communication (so no process group needed).

Errors that need other ranks' shapes (shard lengths differing between ranks) are tested in
test_ring_parity.py; dead or hung peers in test_ring_faults.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from attnkit.distributed import gather_sequence, ring_attention, shard_sequence

Q = torch.randn(1, 4, 6, 8)
KV = torch.randn(1, 2, 6, 8)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(q=Q[0]), ValueError, r"q must be 4-D \(B, heads, Lr, dim\)"),
        (dict(q=Q.numpy()), TypeError, "q must be a torch.Tensor"),
        (dict(k=torch.randn(1, 3, 6, 8), v=torch.randn(1, 3, 6, 8)), ValueError, "multiple of key/value heads.*H=4 and Hkv=3"),
        (dict(k=torch.randn(1, 2, 5, 8)), ValueError, "same local length, got Lr=6, 5, 6"),
        (dict(k=torch.randn(1, 2, 6, 7)), ValueError, "q E=8 and k E=7"),
        (dict(v=KV.double()), TypeError, "share a dtype"),
        (dict(q=Q.long()), TypeError, "floating point"),
        (dict(layout="ring"), ValueError, "layout must be one of"),
        (dict(q=Q[:, :, :5], k=KV[:, :, :5], v=KV[:, :, :5], layout="zigzag"), ValueError, "local length must be even, got Lr=5"),
        (dict(causal=1), TypeError, "causal must be a bool"),
        (dict(scale=-1.0), ValueError, "scale must be a positive"),
        (dict(seq_len=0), ValueError, "seq_len must be a positive int"),
        (dict(timeout=-5), ValueError, "timeout must be a positive number of seconds"),
        (dict(timeout="5s"), TypeError, "timeout must be None, seconds"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    args = dict(q=Q, k=KV, v=KV)
    args.update(kwargs)
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
    with pytest.raises(error, match=match):
        ring_attention(q, k, v, **args)


@pytest.mark.skipif(dist.is_available() and dist.is_initialized(), reason="a process group exists in this process")
def test_uninitialized_process_group_says_how_to_start_one():
    with pytest.raises(RuntimeError, match="init_process_group"):
        ring_attention(Q, KV, KV)
    with pytest.raises(RuntimeError, match="init_process_group"):
        shard_sequence(Q, dim=2)


def test_sequence_helpers_check_dim():
    with pytest.raises(ValueError, match=r"dim must be in \[-4, 4\)"):
        shard_sequence(Q, dim=4)
    with pytest.raises(TypeError, match="dim must be an int"):
        gather_sequence(Q, dim=None)
