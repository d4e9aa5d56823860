"""Large fresh CPU tensors backed by huge pages where Linux allows it.

A fresh tensor of tens of MiB (an attention output, its gradients) is memory the process has
never touched: the first write to every 4 KiB page takes a page fault, and at 64 MiB those faults
cost more than the write itself (one thread: 22 ms to zero 64 MiB of fresh memory against 3 ms to
zero it again). When the kernel's transparent huge pages are in ``madvise`` mode (a common
default), a region the process marks with ``madvise(MADV_HUGEPAGE)`` before touching it is faulted
in 2 MiB pages instead: 7.5 ms for the same 64 MiB. PyTorch can do this for every allocation
(``THP_MEM_ALLOC_ENABLE=1``, read once at start-up); :func:`empty` does it only for the large
buffers attnkit fills itself, so nothing changes for the rest of the program.

The hint covers only the 2 MiB-aligned pages inside the tensor's own storage, never a byte
outside it; it changes how pages are backed, not what they hold, and where it is not available
(not Linux, no libc, THP ``never``, a failing call) :func:`empty` is ``torch.empty``. Memory is
the same: these buffers are written in full anyway.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

import torch

__all__ = ["empty", "MIN_BYTES"]

MIN_BYTES = 8 << 20  # smaller buffers fault in a few hundred pages: the call would not pay for itself
_HUGE = 1 << 21  # 2 MiB, the x86-64 and arm64 huge page
_MADV_HUGEPAGE = 14  # Linux's value on every architecture


def _madvise():
    """libc's madvise, or None where the hint cannot be given."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_FN = _madvise()


def empty(shape, dtype: torch.dtype, device) -> torch.Tensor:
    """``torch.empty(shape, dtype=dtype, device=device)``; on CPU, at :data:`MIN_BYTES` or more,
    with the 2 MiB pages inside its storage marked for huge pages before anything touches them."""
    out = torch.empty(shape, dtype=dtype, device=device)
    nbytes = out.numel() * out.element_size()
    if _FN is None or out.device.type != "cpu" or nbytes < MIN_BYTES:
        return out
    start = out.data_ptr()
    lo = (start + _HUGE - 1) & ~(_HUGE - 1)
    hi = (start + nbytes) & ~(_HUGE - 1)
    if hi > lo:
        _FN(lo, hi - lo, _MADV_HUGEPAGE)  # a hint: a failure (EINVAL with THP off) leaves plain pages
    return out
