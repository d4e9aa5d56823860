"""The ``hf`` extra and the Hugging Face tests require the same transformers.

The architecture tests skip below their ``minversion``; if the extra allowed an older transformers,
an install that follows the extra would skip every one of them and still look green.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _extra_minimum(extra: str, package: str) -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    pins = [re.fullmatch(rf"{package}>=([\d.]+)(,.*)?", d) for d in deps[extra]]
    found = [m.group(1) for m in pins if m]
    assert len(found) == 1, f"the {extra!r} extra should pin {package} with one '>=' lower bound, got {deps[extra]}"
    return found[0]


def test_hf_extra_pins_the_transformers_the_tests_need():
    text = (ROOT / "tests" / "integrations" / "test_hf_archs.py").read_text(encoding="utf-8")
    needed = re.search(r'importorskip\("transformers", minversion="([\d.]+)"\)', text).group(1)
    assert _extra_minimum("hf", "transformers") == needed, (
        f"pyproject's hf extra allows an older transformers than the tests' minversion {needed}: "
        "every HF architecture test would skip on it"
    )
