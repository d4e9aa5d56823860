"""The report's experiment sections, read from the experiment registry: no code per experiment here.

For every registered experiment with a ``report_order``, the section comes from its own
``report(results, out_dir, lang)`` applied to its latest ``results.json`` under the runs folder
(``runs/`` by default: where ``attnkit experiment NAME`` writes). An experiment without results
gets a one-line note saying which command produces them, except those marked ``run_in_report``
(seconds long), which the report runs at their quick configuration into ``out/experiments/NAME``.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

from .html import esc

DEFAULT_RUNS = Path("runs")


def latest_results(name: str, runs: str | Path) -> tuple[dict, Path] | None:
    """The newest (by ``finished``) schema-1 ``results.json`` of experiment ``name`` under ``runs``."""
    from ..experiments.runner import RESULTS_FILE, SCHEMA_VERSION

    best = None
    root = Path(runs)
    for path in root.rglob(RESULTS_FILE) if root.is_dir() else ():
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # unreadable files are not results
        if isinstance(doc, dict) and doc.get("experiment") == name and doc.get("schema_version") == SCHEMA_VERSION:
            if best is None or doc.get("finished", "") > best[0].get("finished", ""):
                best = (doc, path.parent)
    return best


def experiment_sections(runs: str | Path = DEFAULT_RUNS, *, lang: str = "en", run_missing: bool = False) -> list[tuple[str, object]]:
    """``(title, fn(out) -> html or Section)`` for each registered experiment, in report order.
    ``run_missing`` runs the quick configuration of every experiment without results (minutes each),
    not only of those marked ``run_in_report``."""
    from ..experiments import experiments
    from ..experiments.registry import import_errors

    sections = [(exp.title(), partial(_render, exp, Path(runs), lang, run_missing)) for exp in experiments() if exp.report_order is not None]
    # an experiment file that fails to import is shown as a failed section, not silently dropped
    sections += [(f"Experiment module {module}", partial(_import_failed, module, err)) for module, err in import_errors().items()]
    return sections


def _import_failed(module: str, error: str, out: Path):
    raise ImportError(f"attnkit.experiments.{module} failed to import: {error}")


def _render(exp, runs: Path, lang: str, run_missing: bool, out: Path):
    from ..experiments import Results, Section, run_experiment

    found = latest_results(exp.name, runs)
    if found is None:
        if not (exp.run_in_report or run_missing):
            return (f'<p class="note">No results yet under <code>{esc(runs)}/</code>: run '
                    f"<code>attnkit experiment {esc(exp.name)} --quick</code> (or <code>--full</code>), then the report again.</p>")
        run_dir = Path(out) / "experiments" / exp.name
        found = (run_experiment(exp, out=run_dir, show_progress=False), run_dir)
    doc, run_dir = found
    meta = {k: v for k, v in doc.items() if k != "results"}
    section = exp.report(Results(doc["results"], run_dir, meta), Path(out), lang)
    note = (f'<p class="note">From <code>{esc(run_dir)}/results.json</code>: {esc(doc.get("preset", "?"))} configuration, '
            f'seeds {esc(doc.get("seeds"))}, finished {esc(doc.get("finished"))} after {float(doc.get("time_s", 0)):.0f} s.</p>')
    if section is None:
        return note
    if isinstance(section, Section):
        return Section(section.title, section.html + note)
    return str(section) + note
