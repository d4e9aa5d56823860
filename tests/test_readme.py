"""The README's quickstart runs: the first ```python block under the "## Quickstart" heading is
executed as-is in a fresh namespace (in a temporary working directory, so files it writes do not
land in the repository). Skipped only when README.md does not exist; a README without the heading
or without a python block there fails, because then the quickstart promise is broken."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def quickstart_code(text: str) -> str:
    """The first ```python fenced block after a "## Quickstart" heading and before the next "## "."""
    m = re.search(r"^##\s+Quickstart\b.*?$(.*?)(?=^##\s|\Z)", text, flags=re.M | re.S | re.I)
    if m is None:
        raise LookupError('README.md has no "## Quickstart" heading')
    block = re.search(r"^```python[^\n]*\n(.*?)^```", m.group(1), flags=re.M | re.S)
    if block is None:
        raise LookupError('the "## Quickstart" section of README.md has no ```python block')
    return block.group(1)


def test_quickstart_extraction():
    text = "# x\n\n## Install\n```python\nnope\n```\n## Quickstart\ntext\n```bash\nls\n```\n```python\na = 1\n```\n```python\nb = 2\n```\n## Next\n"
    assert quickstart_code(text) == "a = 1\n"
    with pytest.raises(LookupError):
        quickstart_code("## Quickstart\n```bash\nls\n```\n## Next\n```python\nx\n```\n")


def test_readme_quickstart_runs(tmp_path, monkeypatch):
    if not README.exists():
        pytest.skip("README.md is absent")
    code = quickstart_code(README.read_text(encoding="utf-8"))
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__readme_quickstart__"}
    exec(compile(code, f"{README}:Quickstart", "exec"), namespace)  # noqa: S102 - the README is ours
