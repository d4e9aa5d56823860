"""``benchmarks/kernel_floor.py``'s machinery (not its speed): the recorder sees every fused-kernel
call a route makes, a replay rebuilds each call's layout, and the verdicts compare each goal with
its floor the right way round."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

import attnkit
from attnkit import biases, masks

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "kernel_floor.py"

pytestmark = pytest.mark.skipif(not SCRIPT.is_file(), reason="needs a source checkout")


@pytest.fixture(scope="module")
def floor():
    sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("kernel_floor", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _qkv(n, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(1, 2, n, 16, generator=g).to(dtype) for _ in range(3)]


def test_the_recorder_counts_the_custom_routes_kernel_calls(floor):
    """A custom bias on the per-chunk route: one kernel call per query block and key chunk."""
    from attnkit.backends.blockwise.routes.custom import chunk_keys
    from attnkit.backends.blockwise.kernel.tiles import BLOCK

    n = BLOCK * 2 + 40  # three query blocks
    q, k, v = _qkv(n)
    bias = biases.custom_bias(lambda b, h, qi, ki: -(qi - ki).abs().float() / 64, depends_on=())
    step = chunk_keys(1 * 2 * BLOCK)
    chunks = -(-n // step)
    attnkit.attention(q, k, v, bias=bias, backend="blockwise")  # first use: the kernel's one-time self-test
    rec = floor.KernelCalls()
    with torch.no_grad(), rec:
        res = attnkit.attention(q, k, v, bias=bias, backend="blockwise")
    assert "custom bias evaluated per key chunk" in res.report.reason
    assert sum(rec.calls.values()) == 3 * chunks
    (desc, kw), _ = next(iter(rec.calls.items()))
    assert dict(kw)["attn_mask"][0] == "tensor"  # the bias slab went in as the kernel's float mask


def test_a_replay_rebuilds_each_calls_layout(floor):
    """Strided, offset views come back with their sizes, strides and offsets; the mask stays finite."""
    base = torch.randn(4, 3, 100, 16)
    view = base[:, 1:, 10:74:2]
    desc = floor._layout(view)
    again = floor._rebuild(desc, torch.Generator().manual_seed(0))
    assert again.shape == view.shape and again.stride() == view.stride()
    assert again.storage_offset() == view.storage_offset()
    mask = floor._rebuild(floor._layout(torch.randn(1, 2, 8, 8)), torch.Generator().manual_seed(0), mask=True)
    assert bool(torch.isfinite(mask).all()) and float(mask.abs().max()) <= 4


def test_replay_times_the_window_routes_calls(floor):
    q, k, v = _qkv(512)
    mask = masks.sliding_window(63, 0)
    rec = floor.KernelCalls()
    with torch.no_grad(), rec:
        attnkit.attention(q, k, v, mask=mask, backend="blockwise")
    out = floor.replay(rec.calls, reps=1)
    assert out["kernel_calls"] == sum(rec.calls.values()) >= 1
    assert out["kernel_ms"] > 0 and out["gemm_gflop"] > 0
    assert floor.peak_gflops(torch.float32, n=256, reps=1) > 0


def test_the_verdicts_compare_each_goal_with_its_floor(floor):
    rows = {
        "window256_16k": {"route_ms": 200.0, "kernel_ms": 150.0, "gemm_ms": 120.0, "flex_ms": 300.0},
        "window256_4k_fp32": {"route_ms": 40.0, "kernel_ms": 30.0, "gemm_ms": 20.0},
        "window256_4k_bf16": {"route_ms": 40.0, "kernel_ms": 30.0, "gemm_ms": 10.0},
        "custom_8k_none": {"route_ms": 2000.0, "kernel_ms": 1500.0, "gemm_ms": 1200.0, "bias_fn_ms": 300.0, "before_ms": 2400.0},
        "alibi_8k_none": {"route_ms": 1000.0, "kernel_ms": 900.0, "gemm_ms": 800.0, "bias_fn_ms": 0.0, "before_ms": 2400.0},
    }
    v = floor.verdicts(rows)
    assert v["window256_16k"]["kernel_floor_ratio"] == pytest.approx(2.0) and v["window256_16k"]["reachable_at_kernel_rate"]
    assert v["window256_4k_bf16"]["kernel_floor_ratio"] == pytest.approx(1.0)
    assert not v["window256_4k_bf16"]["reachable_at_kernel_rate"]
    assert v["window256_4k_bf16"]["gemm_floor_ratio"] == pytest.approx(0.5)
    custom = v["custom_8k_none"]  # 2400 / (1500 + 300) = 1.33: short of 1.5 even at the kernel's rate
    assert custom["kernel_floor_speedup"] == pytest.approx(2400 / 1800) and not custom["reachable_at_kernel_rate"]
    assert custom["target_ms"] == pytest.approx(1600.0) and custom["route_speedup"] == pytest.approx(1.2)
    assert v["alibi_8k_none"]["reachable_at_kernel_rate"]  # 2400 / 900 = 2.67
