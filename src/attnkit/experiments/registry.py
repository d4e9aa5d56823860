"""The experiment registry: an :class:`Experiment` base class, ``@register``, and lazy discovery.

An experiment is one file in this package holding one ``@register``-ed subclass of
:class:`Experiment`. The built-in files are listed by module name in :data:`BUILTIN`; they are
imported only when an experiment is looked up (so ``attnkit experiment tiny`` never imports the
vision stack), and a listed file that does not exist is skipped silently, so each experiment file
appears without any other file being edited.

    @register
    class Tiny(Experiment):
        name = "tiny"
        quick = {"epochs": 4}
        full = {"epochs": 20}
        def run(self, ctx): ...
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import argparse

    from .context import RunContext

# module names under attnkit.experiments, imported lazily; a missing one is skipped
BUILTIN: tuple[str, ...] = ("tiny", "minilm_maps", "seq2seq", "vision", "forecast", "misconceptions_qkv",
                            "misconceptions_explain", "misconceptions_long", "misconceptions_heads")

_REGISTRY: dict[str, "Experiment"] = {}
_IMPORT_ERRORS: dict[str, str] = {}  # module -> error, for modules that exist but fail to import
_discovered = False


class SetupError(ValueError):
    """A run was asked for with arguments that cannot work; raised before any work is done."""


@dataclass
class Section:
    """One section of ``attnkit report``: a heading and a self-contained HTML body."""

    title: str
    html: str


class Results(dict):
    """What an experiment's ``run`` returned, as handed to its ``report``; a plain dict plus
    ``run_dir`` (the folder of the run, where its PNGs and checkpoints are) and ``meta`` (the rest of
    results.json: config, seeds, env, times)."""

    def __init__(self, results: dict, run_dir: Path, meta: dict):
        super().__init__(results)
        self.run_dir = Path(run_dir)
        self.meta = meta


class Experiment:
    """Base of every experiment. Subclasses set the class attributes and implement :meth:`run`.

    Attributes:
        name: the CLI name (``attnkit experiment NAME``).
        help: one line for ``--list`` and ``--help``.
        quick: the configuration of ``--quick`` (the default): a JSON-able dict.
        full: the configuration of ``--full``.
        report_order: where its section sits in ``attnkit report`` (lower = earlier); None = no section.
        run_in_report: the report runs the quick configuration itself when no results exist
            (only for experiments that take seconds).
        seeds: how many seeds a run uses when ``--seeds`` is not given (per preset: the config's
            ``"seeds"`` key wins).
    """

    name: str = ""
    help: str = ""
    quick: dict = {}
    full: dict = {}
    report_order: int | None = 100
    run_in_report: bool = False
    seeds: int = 1

    def add_arguments(self, parser: "argparse.ArgumentParser") -> None:
        """Add experiment-specific flags; each value lands in ``ctx.config`` under its ``dest``
        (a flag left at a ``None`` default keeps the preset's value)."""

    def run(self, ctx: "RunContext") -> dict:  # pragma: no cover - abstract
        raise NotImplementedError(f"experiment {self.name!r} must implement run(ctx) -> dict")

    def report(self, results: Results, out_dir: Path, lang: str = "en") -> Section | str | None:
        """The report section from the latest results; the default lists the results as JSON."""
        from ..report.html import esc

        text = json.dumps(dict(results), indent=1, default=str)
        if len(text) > 6000:
            text = text[:6000] + "\n…"
        return Section(self.title(), f"<p>{esc(self.help)}</p><pre>{esc(text)}</pre>")

    def title(self) -> str:
        return self.help or self.name

    def __repr__(self) -> str:
        return f"<experiment {self.name!r}: {self.help}>"


def register(cls_or_obj):
    """Class decorator (or call on an instance): add one instance to the registry under ``.name``.

    Re-registering the same class (a module reloaded) replaces it; another class under a taken
    name is an error.
    """
    obj = cls_or_obj() if isinstance(cls_or_obj, type) else cls_or_obj
    if not isinstance(obj, Experiment):
        raise TypeError(f"register: expected an Experiment subclass or instance, got {type(obj).__name__}; "
                        "derive the class from attnkit.experiments.Experiment")
    name = obj.name
    if not isinstance(name, str) or not name or not name.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"register: {type(obj).__name__}.name must be a non-empty word (letters, digits, _ or -), got {name!r}")
    for preset in ("quick", "full"):
        cfg = getattr(obj, preset)
        if not isinstance(cfg, dict):
            raise TypeError(f"register: {type(obj).__name__}.{preset} must be a dict, got {type(cfg).__name__}")
        try:
            json.dumps(cfg)
        except (TypeError, ValueError) as e:
            raise TypeError(f"register: {type(obj).__name__}.{preset} must be JSON-able ({e}); use plain numbers, strings, lists, dicts") from e
    old = _REGISTRY.get(name)
    if old is not None and type(old).__qualname__ != type(obj).__qualname__:
        raise ValueError(f"register: the experiment name {name!r} is taken by {type(old).__qualname__}; choose another name")
    _REGISTRY[name] = obj
    return cls_or_obj


def _import_builtin(module: str) -> None:
    try:
        importlib.import_module(f"{__package__}.{module}")
    except ModuleNotFoundError as e:
        if e.name != f"{__package__}.{module}":  # the file exists but needs something missing
            _IMPORT_ERRORS[module] = f"{type(e).__name__}: {e}"
    except Exception as e:  # a broken experiment must not hide the others
        _IMPORT_ERRORS[module] = f"{type(e).__name__}: {e}"


def _discover() -> None:
    global _discovered
    if not _discovered:
        for module in BUILTIN:
            _import_builtin(module)
        _discovered = True


def names() -> list[str]:
    """Every available experiment's name, sorted."""
    _discover()
    return sorted(_REGISTRY)


def experiments() -> list[Experiment]:
    """Every available experiment, in report order (then by name)."""
    _discover()
    return sorted(_REGISTRY.values(), key=lambda e: (e.report_order is None, e.report_order or 0, e.name))


def import_errors() -> dict[str, str]:
    """Built-in experiment modules that exist but failed to import, with their error."""
    _discover()
    return dict(_IMPORT_ERRORS)


def get(name: str) -> Experiment:
    """The experiment registered as ``name``; imports only its own module when it is a built-in."""
    if not isinstance(name, str):
        raise TypeError(f"experiment name must be a string, got {type(name).__name__}")
    if name not in _REGISTRY and name in BUILTIN:
        _import_builtin(name)
    if name not in _REGISTRY:  # a module may register under another name than its own
        _discover()
    if name not in _REGISTRY:
        msg = f"unknown experiment {name!r}; valid names: {', '.join(names()) or '(none)'}"
        if name in _IMPORT_ERRORS:
            msg = f"experiment {name!r} failed to import: {_IMPORT_ERRORS[name]}"
        raise ValueError(msg)
    return _REGISTRY[name]
