"""Public names that load their file on first use, for the packages of one-concept files
(:mod:`attnkit.modules`, :mod:`attnkit.models`): importing attnkit stays light, and
``attnkit.modules.CBAM`` imports ``attnkit/modules/cbam.py`` only when it is first asked for.

    _EXPORTS = {"CBAM": "cbam", "create_attn": "create_attn", ...}   # public name -> its file
    __all__ = sorted(_EXPORTS)
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
"""

from __future__ import annotations

import importlib
import sys
from typing import Callable


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` (PEP 562) of ``package`` for ``exports``.

    A name equal to its file name is bound now, not lazily: importing the submodule anywhere
    (``import attnkit.modules.create_attn``) sets the package attribute to the *module*, after which
    ``__getattr__`` is never asked again, so the public name would silently become the module."""
    module = sys.modules[package]
    for name, file in exports.items():
        if name == file:
            setattr(module, name, getattr(importlib.import_module(f".{file}", package), name))

    def __getattr__(name: str):
        if name in exports:
            return getattr(importlib.import_module(f".{exports[name]}", package), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(module)) | set(exports))

    return __getattr__, __dir__
