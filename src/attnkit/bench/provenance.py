"""Where and how a benchmark result was made, stamped into every result file.

A number means little without the code and the machine behind it: ``attnkit bench`` and every
script under ``benchmarks/`` (through ``benchmarks/common.py``'s ``record``) write this dict beside
their results, so a JSON can be traced to the commit that made it and rerun the same way.

    {"script": "benchmarks/flex_race.py", "argv": ["--runs", "5"], "commit": "<40 hex>", "dirty": False,
     "torch": "2.13.0+cpu", "python": "3.11.2", "cpu": {"model": ..., "avx512f": True, ...},
     "threads": 1, "date": "2026-12-06T00:00:00Z"}

``commit`` is None outside a git checkout; ``dirty`` says the tracked files had uncommitted changes
(then the commit alone does not rebuild the result).
"""

from __future__ import annotations

import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import torch

CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")  # the ones that change attention's speed


def cpu_flags() -> dict:
    """The CPU's model name and which of :data:`CPU_FLAGS` it has (AVX-512, its bf16 dot products, AMX
    tiles); ``{}`` where /proc/cpuinfo cannot be read."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    flags = set(re.search(r"^flags\s*:(.*)$", text, re.M).group(1).split()) if "flags" in text else set()
    model = re.search(r"^model name\s*:(.*)$", text, re.M)
    return {"model": model.group(1).strip() if model else platform.processor(), **{f: f in flags for f in CPU_FLAGS}}


def _git(cwd: Path, *args: str) -> str | None:
    try:
        r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def provenance(script: str | None = None, argv: list[str] | None = None, repo: Path | None = None) -> dict:
    """The stamp above for the running command: ``script`` (default ``sys.argv[0]``'s name), ``argv``
    (default ``sys.argv[1:]``), the commit of ``repo`` (default: the checkout this file is in)."""
    repo = repo or Path(__file__).resolve().parent
    status = _git(repo, "status", "--porcelain", "--untracked-files=no")
    return {"script": script or Path(sys.argv[0]).name, "argv": list(sys.argv[1:] if argv is None else argv),
            "commit": _git(repo, "rev-parse", "HEAD"), "dirty": bool(status) if status is not None else None,
            "torch": torch.__version__, "python": platform.python_version(), "cpu": cpu_flags(),
            "threads": torch.get_num_threads(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
