"""The unit of the report's page: a :class:`StorySection` and the :class:`SectionContext` it runs in.

The report makes every section itself, in one of two ways: a section that measures (times, trains,
counts) is an experiment (``attnkit.experiments``, one folder each) turned into a section from the
facts it states; a section that measures nothing is a prose module of ``attnkit.report.sections``.
Either way the section is split in two, so that one run serves both languages and the cache:

* ``compute(ctx) -> dict`` measures (or reads) and returns JSON-able numbers; this is what the
  cache keeps, keyed by the section's id and ``inputs(ctx)`` (which name everything that changes
  the numbers, the code included);
* ``render(data, ctx, lang) -> html`` turns those numbers into prose, tables and figures, in
  English or Chinese, without measuring anything.

Every section also states the question it answers and how to read its figure (in both languages),
and may give one row of the closing summary table (``summary(data, ctx, lang) -> (measured, meaning)``).
``lesson`` names the course lesson that goes deeper (its file name without ``.py`` under
``docs/course/en`` and ``docs/course/zh``; the page links a copy of it); ``est_s`` the seconds
``compute`` takes per report size (for the ETA).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

Pair = tuple[str, str]  # (English, Chinese)

SIZES = ("quick", "tiny")  # quick: the default report; tiny: seconds, for tests


@dataclass
class SectionContext:
    """What a section's ``compute`` and ``render`` see.

    out: the report folder; size: ``"quick"`` or ``"tiny"``; runs: where experiment results are
    read (``runs/``); bench_results: the folder of committed benchmark JSON (None: left out);
    committed_results: the folder of committed experiment runs (``results/``; None: left out);
    overrides: experiment name → config overrides for runs the report starts; run_missing: run
    every experiment that has no results (else only those cheap enough, see the experiment
    sections); data: the numbers of sections already computed in this run, by id.
    """

    out: Path
    size: str = "quick"
    runs: Path = Path("runs")
    bench_results: Path | None = None
    committed_results: Path | None = None  # results/<experiment>/<run>/results.json of long runs (None: left out)
    course: Path | None = None  # the course's folder (docs/course of a checkout; None: lessons named, not linked)
    overrides: dict = field(default_factory=dict)
    run_missing: bool = True
    data: dict = field(default_factory=dict)

    def rel(self, path: str | Path) -> str:
        """``path`` relative to the report folder (how the cache records the files it checks)."""
        return Path(path).resolve().relative_to(Path(self.out).resolve()).as_posix()


@dataclass
class StorySection:
    id: str
    title: Pair
    question: Pair
    how_to_read: Pair
    compute: Callable[[SectionContext], dict]
    render: Callable[[dict, SectionContext, str], str]
    inputs: Callable[[SectionContext], dict] = lambda ctx: {}
    est_s: dict = field(default_factory=lambda: {"quick": 5.0, "tiny": 1.0})
    summary: Callable[[dict, "SectionContext", str], tuple[str, str] | None] | None = None
    cache: bool = True
    order: float = 1000  # its place on the page (lower = earlier) when a contents list is sorted
    lesson: str = ""  # the course lesson that goes deeper, e.g. "01_attention_from_scratch"

    def heading(self, lang: str) -> str:
        return self.title[1] if lang == "zh" else self.title[0]

