"""attnkit.core.fresh_memory.empty: torch.empty, with a huge-page hint only inside its own storage."""

from __future__ import annotations

import pytest
import torch

from attnkit.core import fresh_memory


@pytest.mark.parametrize("shape", [(3, 5), (2, 1, 4, 300_000), (0, 7)])
def test_shape_dtype_device_and_values_like_torch_empty(shape):
    t = fresh_memory.empty(shape, torch.float32, "cpu")
    assert t.shape == torch.Size(shape) and t.dtype == torch.float32 and t.device.type == "cpu"
    assert t.is_contiguous()
    t.fill_(1.5)
    assert bool((t == 1.5).all())


def test_the_hint_covers_only_whole_huge_pages_inside_the_storage(monkeypatch):
    calls = []
    monkeypatch.setattr(fresh_memory, "_FN", lambda addr, length, advice: calls.append((addr, length, advice)) or 0)
    t = fresh_memory.empty((3, 1 << 22), torch.float32, "cpu")  # 48 MiB
    start, end = t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()
    (addr, length, advice), = calls
    assert advice == 14 and addr % (1 << 21) == 0 and length % (1 << 21) == 0
    assert start <= addr and addr + length <= end and length >= end - start - 2 * (1 << 21)


def test_small_buffers_and_no_libc_get_no_hint(monkeypatch):
    calls = []
    monkeypatch.setattr(fresh_memory, "_FN", lambda *a: calls.append(a) or 0)
    fresh_memory.empty((1000,), torch.float32, "cpu")
    assert calls == []
    monkeypatch.setattr(fresh_memory, "_FN", None)
    t = fresh_memory.empty((3, 1 << 22), torch.float64, "cpu")
    assert t.shape == (3, 1 << 22) and t.dtype == torch.float64
