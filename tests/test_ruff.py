"""``src/`` passes the ruff configuration in pyproject.toml (``[tool.ruff]``: line length 120, pyflakes
and pycodestyle's errors and warnings). Skipped where ruff is not installed (it is in the dev extra)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _ruff() -> list[str] | None:
    try:
        import ruff  # noqa: F401

        return [sys.executable, "-m", "ruff"]
    except ImportError:
        return [shutil.which("ruff")] if shutil.which("ruff") else None


def test_src_passes_ruff():
    ruff = _ruff()
    if ruff is None:
        pytest.skip("ruff is not installed; enable with: pip install -e '.[dev]'")
    r = subprocess.run([*ruff, "check", "--no-cache", "src"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"ruff check src found:\n{r.stdout[-4000:]}{r.stderr[-1000:]}"


def test_the_configuration_is_in_pyproject():
    import tomllib

    ruff = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["ruff"]
    assert ruff["line-length"] <= 120 and {"E", "F", "W"} <= set(ruff["lint"]["select"])
