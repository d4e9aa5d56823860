"""Attention backends benchmark: ``python -m benchmarks.attention [--quick | --suite must|full]``.

A thin entry point; the suite lives in :mod:`attnkit.bench` so ``attnkit bench`` and
``attnkit report --quick`` call the same code. Results: ``benchmarks/results/attention*.json|png``.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    from attnkit.bench import main
except ImportError:  # running from a checkout without installing: use src/
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    from attnkit.bench import main

if __name__ == "__main__":
    sys.exit(main())
