"""Peak resident memory of this process from /proc (Linux), for benchmarks that measure memory in
a fresh process per case: reset the high-water mark, run, read ``VmHWM - VmRSS`` in KiB."""

from __future__ import annotations

import re


def status_kib(field: str) -> int:
    """A ``/proc/self/status`` field in KiB (``VmRSS``, ``VmHWM``)."""
    with open("/proc/self/status") as f:
        return int(re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M).group(1))


def reset_peak() -> bool:
    """Reset ``VmHWM`` to the current RSS (writing 5 to clear_refs); False where the kernel refuses,
    in which case the peak also counts what the process held before."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False
