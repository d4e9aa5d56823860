"""No function in src/attnkit is longer than MAX_LINES lines.

A function past ~80 lines usually hides two ideas; splitting it where a name explains the part
keeps each piece readable and testable alone. The length of a function is counted as Python's
``ast`` sees it: ``end_lineno - lineno + 1`` of the ``def`` (signature, docstring, body and
blank lines inside it; decorators excluded). Methods and nested functions are counted too, each
on its own (a nested function's lines also count towards the function around it).
"""

from __future__ import annotations

import ast
from pathlib import Path

MAX_LINES = 80
SRC = Path(__file__).resolve().parents[1] / "src" / "attnkit"


def function_lengths(source: str) -> list[tuple[str, int, int]]:
    """(qualified name, line of the ``def``, length in lines) of every function and method in
    ``source``, nested ones included; names are dotted through classes and enclosing functions."""
    found: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                found.append((name, child.lineno, child.end_lineno - child.lineno + 1))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def too_long(root: Path, limit: int = MAX_LINES) -> list[str]:
    """``path:line name (n lines)`` for every function under ``root`` longer than ``limit`` lines."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for name, line, n in function_lengths(path.read_text(encoding="utf-8")):
            if n > limit:
                out.append(f"{path.relative_to(root.parent)}:{line} {name} ({n} lines)")
    return out


KNOWN = '''
import functools


@functools.cache
def decorated(a,
              b):
    """Docstring."""
    x = a + b

    return x


class Box:
    def method(self):
        def inner():
            return 1
        return inner

    async def later(self):
        return 2
'''


def test_scanner_counts_known_functions():
    # decorated: the def line to the return, 6 lines with the blank one inside (the decorator is not counted)
    got = {name: (line, n) for name, line, n in function_lengths(KNOWN)}
    assert got == {
        "decorated": (6, 6),
        "Box.method": (15, 4),
        "Box.method.inner": (16, 2),
        "Box.later": (20, 2),
    }


def test_scanner_reports_a_function_over_the_limit(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES - 1))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text(f"def at_limit():\n{body}\n\n\ndef over():\n{body}\n    return 0\n")
    # at_limit has exactly MAX_LINES lines and passes; over has MAX_LINES + 1
    assert too_long(tmp_path / "pkg") == ["pkg/long.py:83 over (81 lines)"]


def test_scanner_sees_the_package():
    # guards against a vacuous pass: a wrong SRC path would scan nothing
    names = {name for path in SRC.rglob("*.py") for name, _, _ in function_lengths(path.read_text(encoding="utf-8"))}
    assert {"render_html", "ring_attention", "fit"} <= names
    assert len(names) > 200


def test_no_function_over_max_lines():
    long = too_long(SRC)
    assert not long, (
        f"{len(long)} function(s) in src/attnkit are longer than {MAX_LINES} lines; split each where a "
        "name explains the part (a template string can become a module constant, a loop body with "
        "a clear job a function):\n" + "\n".join(long)
    )
