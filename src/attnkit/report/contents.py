"""The contents of ``attnkit report``: every section in the order of the page, then a closing
summary table.

Two kinds of sections share the page, sorted by their place: one per registered experiment with a
``report_order`` (everything that measures: what attention is, masks, cost, positions, the KV
cache, seq2seq, vision, ... and any new experiment folder), built from the facts the experiment
states (see :mod:`.experiment_section`), and the prose sections of :mod:`.sections` (which measure
nothing: the misconception that attention began with the Transformer). No experiment is named here.
An experiment folder that fails to import is shown as a failed section, not silently left out.
"""

from __future__ import annotations

from ..experiments import experiments
from ..experiments.lab.registry import import_errors
from ..page.html import table
from ..page.i18n import tr
from ..page.story import SectionContext, StorySection
from .experiment_section import experiment_section
from .sections import PROSE


def prose_section(module) -> StorySection:
    """The section of a prose module (see :mod:`.sections`): its ``render(ctx, lang)``, nothing
    computed, nothing cached."""
    summary = getattr(module, "summary", None)
    return StorySection(module.ID, module.TITLE, module.QUESTION, module.HOW_TO_READ, lambda ctx: {},
                        lambda data, ctx, lang: module.render(ctx, lang), est_s={"quick": 0.1, "tiny": 0.1},
                        summary=None if summary is None else (lambda data, ctx, lang: summary(ctx, lang)),
                        cache=False, order=module.ORDER, lesson=module.LESSON)


def story() -> list[StorySection]:
    """Every section of the page in order, the summary last."""
    secs = [prose_section(m) for m in PROSE]
    for exp in experiments():
        if exp.report_order is not None:
            secs.append(experiment_section(exp))
    secs += [_import_failed(folder, err) for folder, err in sorted(import_errors().items())]
    secs.sort(key=lambda s: s.order)  # stable: equal orders keep the order above
    secs.append(StorySection("summary", ("Summary", "总结"), ("What did this run measure, in one table?", "本次运行测得了什么（一张表）？"),
                             ("One row per section: what was measured now, and what it means.", "每节一行：本次测得了什么，以及它的含义。"),
                             lambda ctx: {}, summary_render(secs), cache=False))
    return secs


def _import_failed(folder: str, error: str) -> StorySection:
    def compute(ctx: SectionContext) -> dict:
        raise ImportError(f"attnkit.experiments.{folder} failed to import: {error}")

    return StorySection(f"experiment-{folder}", (f"Experiment {folder}", f"实验 {folder}"), ("", ""), ("", ""), compute,
                        lambda d, ctx, lang: "", cache=False)


def summary_render(secs: list[StorySection]):
    """The summary section's ``render``: one row per section of ``secs`` that gives one."""

    def render(data: dict, ctx: SectionContext, lang: str) -> str:
        rows, errors = [], []
        for sec in secs:
            d = ctx.data.get(sec.id)
            if sec.summary is None or d is None:
                continue
            try:
                line = sec.summary(d, ctx, lang)
            except Exception as e:  # collect them all, then fail the summary: a broken row must not pass unseen
                errors.append(f"{sec.id}: {type(e).__name__}: {e}")
                continue
            if line:
                rows.append([sec.heading(lang), *line])
        if errors:
            raise RuntimeError("summary rows failed: " + "; ".join(errors))
        html = table([tr(lang, "section", "章节"), tr(lang, "measured in this run", "本次测得"), tr(lang, "what it means", "含义")], rows)
        return html + "<p class='note'>" + tr(lang, "Columns: the section; its headline number from this run; the lesson it supports.",
                                              "列说明：章节；本次运行的主要数字；它支持的结论。") + "</p>"

    return render


__all__ = ["story", "summary_render", "prose_section"]
