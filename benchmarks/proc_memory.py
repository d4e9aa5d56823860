"""Peak resident memory of this process from /proc (Linux), for benchmarks that measure memory in
a fresh process per case: reset the high-water mark, run, read ``VmHWM - VmRSS`` in KiB."""

from __future__ import annotations

import re
import time
from typing import Callable


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


def time_and_peak(call: Callable[[], object], reps: int) -> tuple[float, list[float], float, bool, object]:
    """One warm-up ``call()`` (its seconds reported: a compile shows here), ``reps`` timed calls, then
    one more with the high-water mark reset: (first call s, [s per timed call], peak KiB above what
    was live before that last call, whether the reset worked, the last call's result)."""
    t0 = time.perf_counter()
    call()
    first = time.perf_counter() - t0
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    exact = reset_peak()
    before = status_kib("VmRSS")
    result = call()
    return first, times, status_kib("VmHWM") - before, exact, result
