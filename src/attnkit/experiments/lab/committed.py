"""Where the report finds committed results: folders given explicitly, never looked up.

Two kinds of committed files are quoted next to the quick measurements ``attnkit report`` makes:

* long benchmarks (tens of minutes): their JSON and PNG in ``benchmarks/results/`` of a source
  checkout, found by :func:`committed`;
* long experiment runs (``attnkit experiment NAME --full``, an hour on 2 cores): their
  ``results/<experiment>/<run>/results.json`` (+ PNG, small HTML), found by :func:`committed_runs`.

Both folders are passed in (``attnkit report`` uses ``benchmarks/results`` and ``results`` of the
current folder, i.e. a checkout; ``--results`` changes the second); nothing is looked up relative
to the installed package, so a wheel install simply has no such folder and those parts are left out.
"""

from __future__ import annotations

from pathlib import Path

from ...page.html import esc
from .results import RESULTS_FILE, Results, is_partial, read_doc


def committed(name: str, root: str | Path | None) -> Path | None:
    """``root/<name>`` when ``root`` is given and the file exists, else None."""
    if root is None:
        return None
    path = Path(root) / name
    return path if path.is_file() else None


def committed_runs(experiment: str, root: str | Path | None):
    """The committed runs of ``experiment``: ``{run name: Results}`` from ``root/<experiment>/<run>/results.json``.

    Sorted by run name (``dates-full`` before ``full``); a file that is unreadable, of another
    schema or of another experiment is skipped (it is not this experiment's result). Each value is
    an :class:`attnkit.experiments.Results`: the run's ``results`` dict, with ``run_dir`` (its
    folder: the PNGs) and ``meta`` (preset, seeds, config, times). Empty when ``root`` is None or
    has no such folder.
    """
    if root is None:
        return {}
    if not isinstance(experiment, str) or not experiment or "/" in experiment or experiment.startswith("."):
        raise ValueError(f"experiment must be a registered experiment's name (one path component), got {experiment!r}")
    base = Path(root) / experiment
    out = {}
    for run_dir in sorted(base.iterdir()) if base.is_dir() else ():
        path = run_dir / RESULTS_FILE
        doc = read_doc(path, experiment) if path.is_file() else None
        if doc is not None and not is_partial(doc):
            out[run_dir.name] = Results.from_doc(doc, run_dir)
    return out


def describe_run(name: str, run, lang: str = "en") -> str:
    """One line naming a committed run: its file, preset, seeds, time and when it finished (plain text)."""
    meta = run.meta
    seeds = meta.get("seeds")
    n = len(seeds) if isinstance(seeds, list) else seeds
    minutes = float(meta.get("time_s") or 0) / 60
    # results/<experiment>/<run>/results.json: where the run sits in a checkout, never a machine's absolute path
    path = (Path("results", *Path(run.run_dir).parts[-2:]) / RESULTS_FILE).as_posix()
    if lang == "zh":
        return (f"已提交的运行 “{name}”（{path}）：{meta.get('preset', '?')} 配置，{n} 个种子，"
                f"用时 {minutes:.0f} 分钟，完成于 {meta.get('finished', '?')}")
    return (f"committed run '{name}' ({path}): {meta.get('preset', '?')} preset, {n} seeds, "
            f"{minutes:.0f} min, finished {meta.get('finished', '?')}")


def committed_first(full_results: dict | None, render, lang: str, replication: tuple[str, str]) -> list[str]:
    """HTML parts for an experiment section that quotes committed ``--full`` runs before its own run.

    Per committed run: a heading, the :func:`describe_run` line and ``render(run, run_dir)``; then,
    when there was any, the heading of the report's own run and ``replication`` (en, zh) — why the
    claims should be read from the committed runs. The caller appends its own run's HTML.
    """
    zh = lang == "zh"
    parts = []
    for name, run in (full_results or {}).items():
        quick = run.meta.get("preset") == "quick"  # a committed --quick run is not called a full one
        head = (f"已提交的{'快速' if quick else '完整'}运行：{name}" if zh else f"Committed {'quick' if quick else 'full'} run: {name}")
        parts.append(f"<h3>{esc(head)}</h3>")
        parts.append(f"<p class='note'>{esc(describe_run(name, run, lang))}.</p>")
        parts.append(render(run, Path(run.run_dir)))
    if full_results:
        parts.append(f"<h3>{esc('本报告自己的运行' if zh else 'This report’s own run')}</h3>")
        parts.append(f"<p>{replication[1] if zh else replication[0]}</p>")
    return parts
