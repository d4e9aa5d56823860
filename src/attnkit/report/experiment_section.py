"""An experiment as a section of the report: :func:`experiment_section` turns a registered
:class:`~attnkit.experiments.Experiment` into a :class:`~attnkit.page.story.StorySection` from the
facts the experiment states (title, question, how to read it, place, time, tiny size, summary row).

The numbers: the experiment's newest results under ``runs/`` or, when there are none, a run of its
quick preset (shrunk by its ``tiny`` overrides at the report's tiny size) into
``report/experiments/NAME``, cached like any section. A preset with a ``bench_results`` key gets the
report's folder of committed benchmark results there (the experiment quotes them beside its numbers). The prose: the experiment's own
``report(results, out, lang, full_results)``, where ``full_results`` are the committed long runs
(``results/<experiment>/<run>/results.json``, from ``ctx.committed_results``; see
:func:`attnkit.experiments.lab.committed.committed_runs`), read at render time.

Missing Debian data (Fashion-MNIST, the Bibles) is the experiment's business: each falls back to a
named data set and says so in its results (``notice``/``data``); the report shows that notice.
"""

from __future__ import annotations

import json
import os
import pkgutil
import sys
from pathlib import Path

from ..experiments import Experiment, Results, Section, latest_results, run_experiment
from ..experiments.lab.committed import committed_runs, describe_run
from ..experiments.lab.threads import threads
from ..page.html import esc
from ..page.i18n import label, tr
from ..page.story import SectionContext, StorySection
from .cache import file_hash, source_hash


#: The shared drawing code an experiment's run draws its figures with: a run's figures are part of what the
#: section caches, so a change here (a colour bar's label, a figure's words) runs the experiment again, as a
#: fresh report would draw it (the MiniLM head grid, for one, lives in attnkit.inspect.plots).
DRAWING_MODULES = ("attnkit.inspect.plots", "attnkit.inspect.figure_text", "attnkit.page.figures")


def experiment_modules(exp: Experiment) -> tuple[str, ...]:
    """Every module of the experiment's folder and the shared drawing code (:data:`DRAWING_MODULES`): what the
    cached numbers and figures depend on."""
    pkg = type(exp).__module__.rsplit(".", 1)[0]
    path = sys.modules[pkg].__path__
    return (pkg, *sorted(f"{pkg}.{m.name}" for m in pkgutil.iter_modules(path) if not m.ispkg), *DRAWING_MODULES)


def overrides_for(exp: Experiment, ctx: SectionContext) -> dict:
    """The configuration changes of a run the report starts: the report's folder of committed
    benchmark results for an experiment whose preset has a ``bench_results`` key, the tiny size's,
    then the caller's."""
    base = {}
    if "bench_results" in exp.quick:
        base["bench_results"] = None if ctx.bench_results is None else str(ctx.bench_results)
    if ctx.size == "tiny":
        base.update(exp.tiny)
    return {**base, **ctx.overrides.get(exp.name, {})}


def experiment_section(exp: Experiment) -> StorySection:
    """The report section of ``exp``, with the experiment's own title, question and summary row."""
    name = exp.name

    def inputs(ctx: SectionContext) -> dict:
        found = latest_results(name, ctx.runs)
        # only what changes the numbers: the experiment's code and configuration, and the results it would read
        return {"name": name, "overrides": overrides_for(exp, ctx), "runs": file_hash(found[1] / "results.json") if found else None,
                "code": source_hash(experiment_modules(exp))}

    def compute(ctx: SectionContext) -> dict:
        found = latest_results(name, ctx.runs)
        if found is not None:
            return {"results": str((found[1] / "results.json").resolve()), "source": "runs"}
        if not (ctx.run_missing or exp.run_in_report):
            return {"missing": True}
        run_dir = Path(ctx.out) / "experiments" / name
        with threads(_threads_for_busy_machine()):
            run_experiment(exp, out=run_dir, overrides=overrides_for(exp, ctx), show_progress=False)
        return {"results": ctx.rel(run_dir / "results.json"), "source": "report", "_files": [ctx.rel(run_dir / "results.json")]}

    def render(data: dict, ctx: SectionContext, lang: str) -> str:
        full = committed_runs(name, ctx.committed_results)  # read at render time: not part of the cached numbers
        if data.get("missing"):
            return _missing(exp, full, ctx, lang)
        path = Path(ctx.out) / data["results"]  # absolute paths stay absolute
        doc = json.loads(path.read_text(encoding="utf-8"))
        body = _body(exp.report(Results.from_doc(doc, path.parent), Path(ctx.out), lang, full_results=full))
        notice = _notice(doc)
        html = ""
        if notice and esc(notice) not in body:  # a data fallback is always visible, once
            html += f'<p class="notice"><b>{esc(label(lang, "notice"))}:</b> {esc(notice)}</p>'
        return html + body + _source_note(doc, _shown_path(path, Path(ctx.out), Path(ctx.runs)), lang)

    def summary(data: dict, ctx: SectionContext, lang: str):
        doc = load_results(data, ctx)
        if doc is None:
            return None
        return exp.summary(doc["results"], lang, full_results=committed_runs(name, ctx.committed_results))

    return StorySection(id=name, title=(exp.heading("en"), exp.heading("zh")), question=exp.question,
                        how_to_read=exp.how_to_read, compute=compute, render=render, inputs=inputs,
                        est_s=dict(exp.est_s), summary=summary, order=exp.report_order if exp.report_order is not None else 1000,
                        lesson=getattr(exp, "lesson", ""))


def _missing(exp: Experiment, full: dict, ctx: SectionContext, lang: str) -> str:
    """No results and none run: the command that makes them, then each committed run's own section."""
    html = "<p class='note'>" + tr(lang, f"No results yet: run <code>attnkit experiment {esc(exp.name)}</code>, then the report again.",
                                   f"还没有结果：先运行 <code>attnkit experiment {esc(exp.name)}</code>，再生成报告。") + "</p>"
    for run_name, res in full.items():
        html += f"<h3>{esc(describe_run(run_name, res, lang))}</h3>" + _body(exp.report(res, Path(ctx.out), lang, full_results={}))
    return html


def _shown_path(path: Path, out: Path, runs: Path) -> str:
    """``path`` as the page names it: relative to the report folder, the current folder or the runs
    folder's parent (``runs/...``), never a machine's absolute path (the page is read elsewhere)."""
    path = path.resolve()
    for base in (out.resolve(), Path.cwd().resolve(), runs.resolve().parent):
        try:
            return path.relative_to(base).as_posix()
        except ValueError:
            continue
    return Path(*path.parts[-4:]).as_posix()  # experiment/run/results.json under some runs folder


def _source_note(doc: dict, path: str, lang: str) -> str:
    seeds = doc.get("seeds")
    seeds = ", ".join(map(str, seeds)) if isinstance(seeds, list) else seeds
    return "<p class='note'>" + tr(
        lang, f"From <code>{esc(path)}</code>: {esc(doc.get('preset', '?'))} preset, seeds {esc(seeds)}, "
              f"{float(doc.get('time_s', 0)):.0f} s, finished {esc(doc.get('finished'))}.",
        f"数据来自 <code>{esc(path)}</code>：{esc(doc.get('preset', '?'))} 配置，种子 {esc(seeds)}，"
        f"用时 {float(doc.get('time_s', 0)):.0f} 秒，完成于 {esc(doc.get('finished'))}。") + "</p>"


def _body(section) -> str:
    if isinstance(section, Section):  # the story's heading (in the page's language) replaces the experiment's title
        return section.html
    return "" if section is None else str(section)


def _threads_for_busy_machine() -> int | None:
    """1 when other processes keep the cores busy (load average above half the cores), else None (torch's setting).

    Why: these experiments' models are small; with two cores shared by other jobs, two spinning OpenMP
    threads made their steps many times slower than one thread (the forecast and misconception runs showed it).
    """
    try:
        load = os.getloadavg()[0]
    except OSError:  # not on every platform
        return None
    return 1 if load > 0.5 * (os.cpu_count() or 1) else None


def _notice(doc: dict) -> str | None:
    """A data fallback the experiment recorded (e.g. sklearn digits instead of Fashion-MNIST)."""
    res = doc.get("results", {})
    data = res.get("data") if isinstance(res, dict) else None
    for src in (res, data if isinstance(data, dict) else {}):
        for key in ("notice", "fallback"):
            if isinstance(src, dict) and src.get(key):
                return str(src[key])
    return None


def load_results(data: dict, ctx: SectionContext) -> dict | None:
    """The results.json an experiment section's data points at (for summaries and cross-references)."""
    if not data or data.get("missing"):
        return None
    return json.loads((Path(ctx.out) / data["results"]).read_text(encoding="utf-8"))
