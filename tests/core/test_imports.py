"""The core never imports a backend, or anything else of attnkit outside ``attnkit.core``.

Read statically (``ast``) from every module under ``src/attnkit/core/``: every ``import`` and
``from ... import`` — at module level, inside functions and under ``TYPE_CHECKING`` alike — must
name the standard library, a third-party package, or a module inside the core. Relative imports
are resolved against the module's own package, so ``from ..backends import sdpa`` is caught as
surely as ``import attnkit.backends``. The built-in backends register themselves from
``attnkit/backends/__init__.py``, imported by ``attnkit/__init__.py``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import attnkit

CORE = Path(attnkit.__file__).resolve().parent / "core"
MODULES = sorted(CORE.rglob("*.py"))


def _package_of(path: Path, core: Path) -> list[str]:
    """Dotted package parts of a file under ``core`` (``attnkit.core`` or deeper)."""
    rel = path.relative_to(core.parent.parent).with_suffix("")
    return list(rel.parts[:-1])  # attnkit/core/x.py and attnkit/core/__init__.py are both in attnkit.core


def imported_modules(path: Path, core: Path = CORE) -> list[tuple[int, str]]:
    """(line, absolute dotted name) of every module ``path`` imports."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = _package_of(path, core)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:
                up = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                if node.level - 1 > len(package) - 1:
                    base = "<above attnkit>"
                else:
                    base = ".".join(up + ([node.module] if node.module else []))
            # `from .. import backends` imports a module by the imported name, so check both
            out.append((node.lineno, base))
            if node.level and not node.module:
                out += [(node.lineno, f"{base}.{a.name}") for a in node.names]
    return out


def violations(path: Path, core: Path = CORE) -> list[str]:
    bad = []
    for line, name in imported_modules(path, core):
        inside_attnkit = name == "attnkit" or name.startswith("attnkit.") or name == "<above attnkit>"
        inside_core = name == "attnkit.core" or name.startswith("attnkit.core.")
        if inside_attnkit and not inside_core:
            bad.append(f"{path.relative_to(core.parent)}:{line} imports {name}")
    return bad


def test_the_core_has_modules_to_check():
    assert len(MODULES) > 10 and CORE / "registry.py" in MODULES and CORE / "cost.py" in MODULES


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_core_module_imports_nothing_outside_the_core(path):
    assert violations(path) == []


@pytest.mark.parametrize(
    "source, caught",
    [
        ("from ..backends.sdpa import _uses_is_causal\n", True),
        ("from .. import backends\n", True),
        ("import attnkit.backends\n", True),
        ("def f():\n    from attnkit.backends import tiling\n", True),  # inside a function too
        ("if TYPE_CHECKING:\n    from ..modules import cache\n", True),
        ("from ...elsewhere import x\n", True),  # above the package
        ("from . import masks\nfrom .tiles import EMPTY\nimport torch\nfrom attnkit.core import cost\n", False),
    ],
)
def test_the_check_catches_imports_out_of_the_core(tmp_path, source, caught):
    # a module written into a temporary copy of the core's place, so relative imports resolve alike
    fake_core = tmp_path / "attnkit" / "core"
    fake_core.mkdir(parents=True)
    module = fake_core / "probe.py"
    module.write_text(source)
    assert bool(violations(module, fake_core)) is caught, violations(module, fake_core)
