"""Story sections that come from registered experiments (seq2seq, MiniLM, vision, forecasting, the
misconceptions): the report finds the experiment's newest results under ``runs/`` or, when there
are none, runs its quick preset into ``report/experiments/NAME`` (cached like any section), then
shows the experiment's own ``report(results, out, lang)`` under the story's question.

Committed long runs (``results/<experiment>/<run>/results.json``, e.g. ``results/vision/full``) are
shown beside the quick run: the folder comes from ``ctx.committed_results`` (``attnkit report
--results DIR``, default ``results`` of the current checkout; see :func:`.committed.committed_runs`).
An experiment whose ``report`` accepts ``full_results`` receives them as ``{run name: Results}`` and
decides how to show them; for any other, each committed run's own section is appended below the
quick one under a heading that names the run's file.

Missing Debian data (Fashion-MNIST, the Bibles) is the experiment's business: each falls back to a
named data set and says so in its results (``notice``/``data``); the report shows that notice.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
from pathlib import Path

from ..experiments.misconceptions_threads import threads
from .cache import file_hash, source_hash
from .committed import committed_runs, describe_run
from .experiments_section import latest_results
from .html import esc
from .i18n import label, tr
from .story import Pair, SectionContext, StorySection

# size "tiny" (tests): each experiment shrunk to seconds
TINY = {
    "seq2seq": {"n_train": 96, "n_valid": 24, "n_test": 40, "epochs": 1, "params": 20_000, "batch_size": 32, "seeds": 1},
    "minilm_maps": {"ablation": False, "per_layer": False},
    "vision": {"data": "digits", "train_limit": 64, "test_limit": 32, "epochs": 1, "batch_size": 32,
               "models": "resnet,cbam,mhsa,vit", "seeds": 1},
    "forecast": {"epochs": 1, "max_train_windows": 64, "train_stride": 1, "eval_stride": 16, "width": 8, "input_len": [64],
                 "horizon": [8], "batch_size": 32, "models": ["naive", "lstm", "lstm_attention"]},
    "misconceptions_explain": {"sentences": 2},
    "misconceptions_long": {"ns": [64, 128], "repeats": 1},
    "misconceptions_heads": {"head_counts": [1, 4], "seeds": 1, "epochs": 1, "prune_sentences": 2, "prune_counts": [0, 24]},
}


def _modules(exp) -> tuple[str, ...]:
    """The experiment's module and its siblings sharing the name's prefix (seq2seq_*.py): its code."""
    mod = type(exp).__module__
    path = Path(sys.modules[mod].__file__)
    pkg = mod.rsplit(".", 1)[0]
    stem = path.stem.split("_")[0]
    return tuple(sorted(f"{pkg}.{p.stem}" for p in path.parent.glob(f"{stem}*.py")))


def overrides_for(name: str, ctx: SectionContext) -> dict:
    base = TINY.get(name, {}) if ctx.size == "tiny" else {}
    return {**base, **ctx.overrides.get(name, {})}


def experiment_section(name: str, title: Pair, question: Pair, how_to_read: Pair, *, est_quick: float, section_id: str | None = None,
                       summary=None) -> StorySection:
    def exp():
        from ..experiments import get

        return get(name)

    def inputs(ctx: SectionContext) -> dict:
        found = latest_results(name, ctx.runs)
        # only what changes the numbers: the experiment's code and configuration, and the results it would read
        return {"name": name, "overrides": overrides_for(name, ctx), "runs": file_hash(found[1] / "results.json") if found else None,
                "code": source_hash(_modules(exp()))}

    def compute(ctx: SectionContext) -> dict:
        from ..experiments import run_experiment

        found = latest_results(name, ctx.runs)
        if found is not None:
            return {"results": str((found[1] / "results.json").resolve()), "source": "runs"}
        e = exp()
        if not (ctx.run_missing or e.run_in_report):
            return {"missing": True}
        run_dir = Path(ctx.out) / "experiments" / name
        with threads(_threads_for_busy_machine()):
            run_experiment(e, out=run_dir, overrides=overrides_for(name, ctx), show_progress=False)
        return {"results": ctx.rel(run_dir / "results.json"), "source": "report", "_files": [ctx.rel(run_dir / "results.json")]}

    def render(data: dict, ctx: SectionContext, lang: str) -> str:
        from ..experiments import Results

        e = exp()
        full = committed_runs(name, ctx.committed_results)  # read at render time: not part of the cached numbers
        if data.get("missing"):
            html = "<p class='note'>" + tr(lang, f"No results yet: run <code>attnkit experiment {esc(name)}</code>, then the report again.",
                                         f"还没有结果：先运行 <code>attnkit experiment {esc(name)}</code>，再生成报告。") + "</p>"
            return html + (_committed_fallback(e, full, ctx, lang) if full else "")
        path = Path(ctx.out) / data["results"]  # absolute paths stay absolute
        doc = json.loads(path.read_text(encoding="utf-8"))
        results = Results(doc["results"], path.parent, {k: v for k, v in doc.items() if k != "results"})
        takes_full = full and accepts_full_results(e.report)
        body = _body(e.report(results, Path(ctx.out), lang, full_results=full) if takes_full else e.report(results, Path(ctx.out), lang))
        if full and not takes_full:
            body += _committed_fallback(e, full, ctx, lang)
        notice = _notice(doc)
        html = ""
        if notice and esc(notice) not in body:  # a data fallback is always visible, once
            html += f'<p class="notice"><b>{esc(label(lang, "notice"))}:</b> {esc(notice)}</p>'
        html += body
        html += "<p class='note'>" + tr(
            lang, f"From <code>{esc(path)}</code>: {esc(doc.get('preset', '?'))} preset, seeds {esc(doc.get('seeds'))}, "
                  f"{float(doc.get('time_s', 0)):.0f} s, finished {esc(doc.get('finished'))}.",
            f"数据来自 <code>{esc(path)}</code>：{esc(doc.get('preset', '?'))} 配置，种子 {esc(doc.get('seeds'))}，"
            f"用时 {float(doc.get('time_s', 0)):.0f} 秒，完成于 {esc(doc.get('finished'))}。") + "</p>"
        return html

    def _summary(data: dict, ctx: SectionContext, lang: str):
        doc = None if summary is None else load_results(data, ctx)
        if doc is None:
            return None
        full = committed_runs(name, ctx.committed_results)
        if full and accepts_full_results(summary):  # the committed runs, for a summary that can use them
            return summary(doc["results"], lang, full_results=full)
        return summary(doc["results"], lang)

    return StorySection(id=section_id or name, title=title, question=question, how_to_read=how_to_read, compute=compute,
                        render=render, inputs=inputs, modules=(),
                        est_s={"quick": est_quick, "tiny": 8.0}, summary=_summary)


def accepts_full_results(report) -> bool:
    """Whether an experiment's ``report`` takes the committed runs (a ``full_results`` or ``**kwargs`` parameter)."""
    try:
        params = inspect.signature(report).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "full_results" or p.kind is p.VAR_KEYWORD for p in params)


def _body(section) -> str:
    from ..experiments import Section

    if isinstance(section, Section):  # the story's heading (in the page's language) replaces the experiment's title
        return section.html
    return "" if section is None else str(section)


def _committed_fallback(e, full: dict, ctx: SectionContext, lang: str) -> str:
    """For an experiment whose ``report`` does not take ``full_results``: its own section of each committed run."""
    html = ""
    for run_name, res in full.items():
        html += f"<h3>{esc(describe_run(run_name, res, lang))}</h3>" + _body(e.report(res, Path(ctx.out), lang))
    return html


def _threads_for_busy_machine() -> int | None:
    """1 when other processes keep the cores busy (load average above half the cores), else None (torch's setting).

    Why: these experiments' models are small; with two cores shared by other jobs, two spinning OpenMP
    threads made their steps 10-50× slower (the forecast and misconception experiments measured it).
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
