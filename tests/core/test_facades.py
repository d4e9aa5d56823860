"""``attnkit.core.masks`` and ``attnkit.core.biases`` are facades over base modules: the base class
lives in ``mask_base`` / ``bias_base``, every kind imports the base (never the facade), and no core
module imports anything below its first definition (the old "re-import the subclasses at the
bottom" cycle). The facades still export every public name from the file that defines it."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import attnkit

CORE = Path(attnkit.__file__).resolve().parent / "core"
MASK_KINDS = ("mask_algebra", "mask_chunked", "mask_convert", "mask_kinds", "mask_values")
BIAS_KINDS = ("softcap",)


def _late_imports(path: Path) -> list[int]:
    """Lines of module-level imports that come after the first function or class."""
    body = ast.parse(path.read_text(encoding="utf-8")).body
    seen_def, late = False, []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            seen_def = True
        elif seen_def and isinstance(node, (ast.Import, ast.ImportFrom)):
            late.append(node.lineno)
    return late


@pytest.mark.parametrize("path", sorted(CORE.glob("*.py")), ids=lambda p: p.name)
def test_no_core_module_imports_below_its_definitions(path):
    assert _late_imports(path) == [], f"{path.name} imports below its definitions: move the import up or break the cycle with a base module"


def test_the_check_catches_a_bottom_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import os\n\nclass A:\n    pass\n\nfrom .kinds import B  # noqa: E402\n")
    assert _late_imports(f) == [6]


@pytest.mark.parametrize("name,base,facade", [(k, "mask_base", "masks") for k in MASK_KINDS] + [(k, "bias_base", "biases") for k in BIAS_KINDS])
def test_every_kind_imports_the_base_not_the_facade(name, base, facade):
    tree = ast.parse((CORE / f"{name}.py").read_text(encoding="utf-8"))
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 1}
    assert base in modules and facade not in modules, (name, sorted(m for m in modules if m))


def test_the_facades_export_each_name_from_its_defining_file():
    from attnkit.core import bias_base, biases, mask_base, masks

    for name in masks.__all__:
        obj = getattr(masks, name)
        home = getattr(obj, "__module__", None) if isinstance(obj, type) or callable(obj) and hasattr(obj, "__code__") else None
        if home:  # classes and functions: the object is the one its own file defines
            assert getattr(importlib.import_module(home), name) is obj, name
    assert masks.Mask is mask_base.Mask and biases.ScoreModifier is bias_base.ScoreModifier
    assert isinstance(masks.causal() & masks.sliding_window(3), masks.AndMask)
    assert isinstance(~masks.causal(), masks.NotMask) and biases.softcap(30.0).final
