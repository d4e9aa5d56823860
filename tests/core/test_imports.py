"""The core never imports a backend, or anything else of attnkit outside ``attnkit.core``; importing
attnkit and eager calls load no part of the compiler stack (torch._dynamo, torch.onnx, sympy); and
above the library, imports flow report → experiments → page (page imports no other attnkit module,
experiments never import the report).

Read statically (``ast``) from every module under ``src/attnkit/core/``: every ``import`` and
``from ... import`` — at module level, inside functions and under ``TYPE_CHECKING`` alike — must
name the standard library, a third-party package, or a module inside the core. Relative imports
are resolved against the module's own package, so ``from ..backends import sdpa`` is caught as
surely as ``import attnkit.backends``. The built-in backends register themselves from
``attnkit/backends/__init__.py``, imported by ``attnkit/__init__.py``.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
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


# The layers above the library: report → experiments → page. The page (HTML, languages, figures,
# the section type) imports nothing else of attnkit; experiments never import the report.
ATTNKIT = CORE.parent
LAYER_RULES = {
    "page": lambda name: name == "attnkit.page" or name.startswith("attnkit.page."),
    "experiments": lambda name: not (name == "attnkit.report" or name.startswith("attnkit.report.")),
}
LAYER_MODULES = [(layer, p) for layer in LAYER_RULES for p in sorted((ATTNKIT / layer).rglob("*.py"))]


def layer_violations(path: Path, layer: str, root: Path = ATTNKIT) -> list[str]:
    allowed = LAYER_RULES[layer]
    bad = []
    for line, name in imported_modules(path, root / layer):
        inside_attnkit = name == "attnkit" or name.startswith("attnkit.") or name == "<above attnkit>"
        if inside_attnkit and not allowed(name):
            bad.append(f"{path.relative_to(root)}:{line} imports {name}")
    return bad


def test_the_layers_have_modules_to_check():
    layers = {layer for layer, _ in LAYER_MODULES}
    assert layers == {"page", "experiments"} and len(LAYER_MODULES) > 20
    # the report's sections that measure are experiments, under the same fence (the prose ones: tests/report/test_prose_sections.py)
    checked = {p.relative_to(ATTNKIT).as_posix() for _, p in LAYER_MODULES}
    assert {f"experiments/{name}/experiment.py" for name in ("intro", "masks", "cost", "positions", "kv_cache")} <= checked


@pytest.mark.parametrize("layer, path", LAYER_MODULES, ids=lambda x: x if isinstance(x, str) else x.name)
def test_imports_flow_report_to_experiments_to_page(layer, path):
    assert layer_violations(path, layer) == []


@pytest.mark.parametrize(
    "layer, source, caught",
    [
        ("page", "from ..core import masks\n", True),
        ("page", "def f():\n    from ..experiments import get\n", True),
        ("page", "from .html import esc\nimport matplotlib\n", False),
        ("experiments", "def f():\n    from ..report.build import write_report\n", True),
        ("experiments", "import attnkit.report\n", True),
        ("experiments", "from ..page.html import esc\nfrom .. import attention\n", False),
    ],
)
def test_the_layer_check_catches_imports_against_the_flow(tmp_path, layer, source, caught):
    folder = tmp_path / "attnkit" / layer
    folder.mkdir(parents=True)
    module = folder / "probe.py"
    module.write_text(source)
    assert bool(layer_violations(module, layer, tmp_path / "attnkit")) is caught


# ``import attnkit`` and eager calls never load the compiler stack: torch._dynamo alone brings
# sympy, torch.onnx and ~880 modules (~1 s). Compile-only code lives in attnkit.core.traced and
# attnkit.backends.blockwise.loop.traced, imported inside the torch.compile branches. Checked in a fresh
# interpreter: this test process has long since loaded them (test_compile).
_COMPILER_STACK = ("torch._dynamo", "torch.onnx", "sympy")


def _loaded_in_fresh_process(code: str) -> dict[str, bool]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "OMP_NUM_THREADS": "1"}
    probe = code + f"\nimport json, sys\nprint(json.dumps({{m: m in sys.modules for m in {_COMPILER_STACK!r}}}))\n"
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_attnkit_loads_no_compiler_stack():
    assert _loaded_in_fresh_process("import torch\nimport attnkit") == dict.fromkeys(_COMPILER_STACK, False)


def test_eager_calls_on_every_exact_backend_load_no_dynamo():
    code = """
import torch, attnkit
from attnkit import masks
q = torch.randn(2, 4, 16, 8, requires_grad=True)
for backend in ("sdpa", "blockwise", "reference"):
    for mask in (None, masks.causal(), masks.padding_mask(torch.tensor([5, 16]), 16)):
        attnkit.attention(q, q, q, mask=mask, backend=backend).out.sum().backward()
    attnkit.attention(q, q, q, mask=masks.causal(), backend=backend, dropout_p=0.1)
attnkit.attention(q, q, q, backend="linear")
"""
    loaded = _loaded_in_fresh_process(code)
    assert not loaded["torch._dynamo"] and not loaded["torch.onnx"], loaded
