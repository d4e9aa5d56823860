"""The experiment registry: the :class:`Experiment` base class, ``@register``, and lazy discovery.

An experiment is one folder under ``attnkit/experiments/`` (a package) whose ``__init__.py``
imports the module holding its ``@register``-ed subclass of :class:`Experiment`. The class states
the experiment's facts: its name and presets, and for the report its bilingual title, the question
its section answers, how to read its figure, where the section sits, how long the report's run
takes and the tiny size tests use. Nothing outside the folder names it: the registry lists the
folders of the package (without importing them) and imports one only when it is needed, so
``attnkit experiment tiny`` never imports the vision stack, and a new folder appears without any
other file being edited.

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
import pkgutil
from pathlib import Path
from typing import TYPE_CHECKING

from ...page.html import esc
from .results import Results, Section

if TYPE_CHECKING:  # pragma: no cover
    import argparse

    from .context import RunContext

PACKAGE = __package__.rsplit(".", 1)[0]  # attnkit.experiments: one folder per experiment
SHARED = ("lab",)  # folders of the package that hold no experiment

Pair = tuple[str, str]  # (English, Chinese)

_REGISTRY: dict[str, "Experiment"] = {}
_IMPORT_ERRORS: dict[str, str] = {}  # folder -> error, for folders that exist but fail to import
_imported: set[str] = set()


class SetupError(ValueError):
    """A run was asked for with arguments that cannot work; raised before any work is done."""


class Experiment:
    """Base of every experiment. Subclasses set the class attributes and implement :meth:`run`.

    What a run is:
        name: the CLI name (``attnkit experiment NAME``).
        help: one line for ``--list`` and ``--help``.
        quick: the configuration of ``--quick`` (the default): a JSON-able dict.
        full: the configuration of ``--full``.
        tiny: overrides of ``quick`` that shrink it to seconds: the report's ``size="tiny"`` (tests).
        seeds: how many seeds a run uses when ``--seeds`` is not given (the config's ``"seeds"`` key wins).

    Its section of ``attnkit report`` (each text an (English, Chinese) pair):
        title: the section's heading (empty: ``help`` in both languages).
        question: the question the section answers.
        how_to_read: how to read its figure.
        report_order: where the section sits (lower = earlier; ``intro`` sits at 10, the
            report's one prose section at 100, ``roadmap`` at 990); None = no section.
        est_s: seconds the report's own run takes, per report size (for its ETA).
        run_in_report: the report runs the quick configuration itself when no results exist
            even when asked to run none (only for experiments that take seconds).
    """

    name: str = ""
    help: str = ""
    quick: dict = {}
    full: dict = {}
    tiny: dict = {}
    seeds: int = 1
    title: Pair = ("", "")
    question: Pair = ("", "")
    how_to_read: Pair = ("", "")
    report_order: int | None = 1000
    est_s: dict = {"quick": 60.0, "tiny": 8.0}
    run_in_report: bool = False

    def add_arguments(self, parser: "argparse.ArgumentParser") -> None:
        """Add experiment-specific flags; each value lands in ``ctx.config`` under its ``dest``
        (a flag left at a ``None`` default keeps the preset's value)."""

    def run(self, ctx: "RunContext") -> dict:  # pragma: no cover - abstract
        raise NotImplementedError(f"experiment {self.name!r} must implement run(ctx) -> dict")

    def report(self, results: Results, out_dir: Path, lang: str = "en", full_results: dict | None = None) -> Section | str | None:
        """The report section from this run's ``results``; ``full_results`` are the committed long
        runs (``{run name: Results}``, empty when there are none), to show beside it.

        The default lists the results, then each committed run's, as JSON.
        """
        def dump(res) -> str:
            text = json.dumps(dict(res), indent=1, default=str)
            if len(text) > 6000:
                text = text[:6000] + "\n…"
            return f"<pre>{esc(text)}</pre>"

        html = f"<p>{esc(self.help)}</p>" + dump(results)
        for run_name, run in (full_results or {}).items():
            html += f"<h3>{esc(run_name)}</h3>" + dump(run)
        return Section(self.heading(lang), html)

    def summary(self, results: dict, lang: str = "en", full_results: dict | None = None) -> tuple[str, str] | None:
        """One row of the report's closing table: (what this run measured, what it means); None: no row."""
        return None

    def heading(self, lang: str = "en") -> str:
        """The section's title in ``lang``."""
        en, zh = self.title
        return (zh if lang == "zh" else en) or self.help or self.name

    def __repr__(self) -> str:
        return f"<experiment {self.name!r}: {self.help}>"


def _check_pair(obj, attr: str) -> None:
    value = getattr(obj, attr)
    if not (isinstance(value, tuple) and len(value) == 2 and all(isinstance(s, str) for s in value)):
        raise TypeError(f"register: {type(obj).__name__}.{attr} must be an (English, Chinese) pair of strings, got {value!r}")


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
    for preset in ("quick", "full", "tiny"):
        cfg = getattr(obj, preset)
        if not isinstance(cfg, dict):
            raise TypeError(f"register: {type(obj).__name__}.{preset} must be a dict, got {type(cfg).__name__}")
        try:
            json.dumps(cfg)
        except (TypeError, ValueError) as e:
            raise TypeError(f"register: {type(obj).__name__}.{preset} must be JSON-able ({e}); use plain numbers, strings, lists, dicts") from e
    for attr in ("title", "question", "how_to_read"):
        _check_pair(obj, attr)
    if not (isinstance(obj.est_s, dict) and all(isinstance(v, (int, float)) and v >= 0 for v in obj.est_s.values())):
        raise TypeError(f"register: {type(obj).__name__}.est_s must map a report size to seconds, e.g. "
                        f"{{'quick': 60, 'tiny': 8}}, got {obj.est_s!r}")
    old = _REGISTRY.get(name)
    if old is not None and type(old).__qualname__ != type(obj).__qualname__:
        raise ValueError(f"register: the experiment name {name!r} is taken by {type(old).__qualname__}; choose another name")
    _REGISTRY[name] = obj
    return cls_or_obj


def folders() -> list[str]:
    """The experiment folders of the package, by name, without importing any of them."""
    pkg = importlib.import_module(PACKAGE)
    return sorted(m.name for m in pkgutil.iter_modules(pkg.__path__)
                  if m.ispkg and m.name not in SHARED and not m.name.startswith("_"))


def _import_folder(folder: str) -> None:
    if folder in _imported:
        return
    _imported.add(folder)
    try:
        importlib.import_module(f"{PACKAGE}.{folder}")
    except Exception as e:  # a broken experiment must not hide the others
        _IMPORT_ERRORS[folder] = f"{type(e).__name__}: {e}"


def _discover() -> None:
    for folder in folders():
        _import_folder(folder)


def names() -> list[str]:
    """Every available experiment's name, sorted."""
    _discover()
    return sorted(_REGISTRY)


def experiments() -> list[Experiment]:
    """Every available experiment, in report order (then by name)."""
    _discover()
    return sorted(_REGISTRY.values(), key=lambda e: (e.report_order is None, e.report_order or 0, e.name))


def import_errors() -> dict[str, str]:
    """Experiment folders that exist but failed to import, with their error."""
    _discover()
    return dict(_IMPORT_ERRORS)


def get(name: str) -> Experiment:
    """The experiment registered as ``name``. A folder of that name is imported alone; only a name
    no folder carries (a folder may hold several experiments) imports them all to find it."""
    if not isinstance(name, str):
        raise TypeError(f"experiment name must be a string, got {type(name).__name__}")
    if name not in _REGISTRY and name in folders():
        _import_folder(name)
    if name not in _REGISTRY:
        _discover()
    if name not in _REGISTRY:
        msg = f"unknown experiment {name!r}; valid names: {', '.join(names()) or '(none)'}"
        if name in _IMPORT_ERRORS:
            msg = f"experiment {name!r} failed to import: {_IMPORT_ERRORS[name]}"
        raise ValueError(msg)
    return _REGISTRY[name]
