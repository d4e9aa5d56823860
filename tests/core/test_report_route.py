"""The report says which code path ran, not only which backend: a call with NaN or inf that some
query may see runs the reference's computation whatever the backend, and the blockwise backend has a
fused-kernel route and a Python tile loop."""

from __future__ import annotations

import pytest
import torch

import attnkit
from attnkit import masks as M
from attnkit.backends.blockwise.kernel import gate as fused_gate
from attnkit.backends.nonfinite import EXACT_ROUTE


def _qkv(L=64, S=64, E=16):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(1, 2, L, E, generator=g), torch.randn(1, 2, S, E, generator=g), torch.randn(1, 2, S, E, generator=g))


@pytest.mark.parametrize("backend", ["auto", "sdpa", "blockwise"])
def test_a_nan_input_reports_the_exact_path(backend):
    q, k, v = _qkv()
    q[0, 0, 3, 1] = float("nan")
    res = attnkit.attention(q, k, v, mask=M.causal(), backend=backend)
    assert res.report.reason.endswith("ran: " + EXACT_ROUTE), res.report.reason
    assert torch.isnan(res.out[0, 0, 3]).all()  # and the NaN is where the reference puts it
    clean = attnkit.attention(*_qkv(), mask=M.causal(), backend=backend)
    assert EXACT_ROUTE not in clean.report.reason


def test_blockwise_names_its_route():
    q, k, v = _qkv(L=256, S=256)
    mask = M.sliding_window(31, 0)
    fused = attnkit.attention(q, k, v, mask=mask, backend="blockwise").report.reason
    fused_gate.set_enabled(False)
    try:
        loop = attnkit.attention(q, k, v, mask=mask, backend="blockwise").report.reason
    finally:
        fused_gate.set_enabled(True)
    assert loop.endswith("ran: Python tile loop"), loop
    assert fused.endswith("ran: fused kernel, banded windows per query block"), fused
