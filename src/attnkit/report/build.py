"""``attnkit report``: run the story's sections (or reuse their cache) and write one HTML page.

Each section (:class:`attnkit.page.story.StorySection`) first measures (``compute``, cached by a hash
of its inputs, code included, see :mod:`.cache`), then writes its prose in the page's language (``render``).
A section that fails is shown on the page with its error, the rest of the page is still written
(an hour of experiments should not be lost to one broken plot), and :func:`report_command`
returns 1. A progress line per section says what runs now and how long the rest should take.
"""

from __future__ import annotations

import platform
import shutil
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from ..experiments import SetupError, check_out
from ..page.glossary import annotate, glossary_html
from ..page.html import esc, page
from ..page.i18n import check_lang, label, tr
from ..page.story import SIZES, SectionContext, StorySection
from . import cache

DEFAULT_OUT = Path("report")


@dataclass
class ReportRun:
    """What :func:`write_report` did: the page, and per section id whether it failed, was cached, took."""

    path: Path
    failed: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)
    seconds: dict = field(default_factory=dict)


def default_sections() -> list[StorySection]:
    """Every section, in the order of the page (see :mod:`.contents`)."""
    from .contents import story

    return story()


def _check_sections(sections) -> list[StorySection]:
    sections = list(sections)
    for s in sections:
        if not isinstance(s, StorySection):
            raise TypeError(f"sections must be StorySection objects (attnkit.page.story.StorySection), got {type(s).__name__}: "
                            f"{s!r:.80}; build one with an id, titles, compute(ctx) and render(data, ctx, lang)")
    return sections


def _fmt_s(s: float) -> str:
    return f"{s / 60:.0f} min {s % 60:02.0f} s" if s >= 60 else f"{s:.0f} s"


def _key(sec: StorySection, ctx: SectionContext) -> str | None:
    if not sec.cache:
        return None
    return cache.section_key(sec.id, {"size": ctx.size, **sec.inputs(ctx)}, ("attnkit.page.story",))


def write_report(
    out_dir: str | Path = DEFAULT_OUT,
    sections: list | None = None,
    *,
    lang: str = "en",
    force: bool = False,
    size: str = "quick",
    runs: str | Path | None = None,
    run_missing: bool = True,
    bench_results: str | Path | None = "benchmarks/results",
    committed_results: str | Path | None = "results",
    course: str | Path | None = "docs/course",
    overrides: dict | None = None,
    log: Callable[[str], None] = print,
) -> ReportRun:
    """Compute (or reuse) every section and write ``out_dir/index.html`` in ``lang``.

    ``bench_results`` is the folder of committed benchmark results that the cost sections quote
    (default ``benchmarks/results`` of the current folder: a source checkout; None or a missing
    folder leaves those parts out). ``committed_results`` is the folder of committed experiment runs
    (``results/<experiment>/<run>/results.json``, default ``results`` of the current folder) shown
    beside the quick runs in the experiment sections. ``size="tiny"`` shrinks every measurement to seconds (tests).
    ``overrides`` maps an experiment name to config overrides for runs the report starts.
    ``course`` is the course's folder (default ``docs/course`` of a checkout): each section's lesson
    is copied into ``out_dir/course/`` and linked relatively, so the folder can move as a whole.
    """
    check_lang(lang)
    if size not in SIZES:
        raise ValueError(f"size must be one of {', '.join(SIZES)}, got {size!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ctx = SectionContext(out=out, size=size, runs=Path(runs or "runs"), bench_results=_folder(bench_results),
                         committed_results=_folder(committed_results), course=_folder(course), overrides=dict(overrides or {}),
                         run_missing=run_missing)
    secs = _check_sections(default_sections() if sections is None else sections)
    summary = next((s for s in secs if s.id == "summary"), None)
    secs = [s for s in secs if s.id != "summary"]

    run = ReportRun(path=out / "index.html")
    rendered: list[tuple[str, str, str, bool]] = []  # (id, heading, body, failed)
    eta = _Eta(size)
    n = len(secs) + (summary is not None)
    computed = []  # every section measures first, then every section writes: a section may quote one later on the page
    for i, sec in enumerate(secs, 1):
        computed.append(_compute_section(sec, ctx, force, run, eta, secs[i - 1:], lambda m: log(f"[{i}/{n}] {m}")))
    for sec, err in zip(secs, computed):
        heading, body, bad = _render_section(sec, ctx, lang, run, err, log)
        rendered.append((sec.id, heading, body, bad))
    if summary is not None:
        rendered.append(_summary_part(summary, ctx, lang, run))
        log(f"[{n}/{n}] {summary.heading(lang)}: " + ("FAILED" if summary.id in run.failed else "done"))
    rendered = _with_glossary(rendered, lang)
    run.path.write_text(page(label(lang, "title"), [(h, b) for _, h, b, _ in rendered], intro=_intro(size, lang), lang=lang,
                             ids=[i for i, _, _, _ in rendered], failed=[f for *_, f in rendered],
                             contents=label(lang, "contents")), encoding="utf-8")
    log(f"wrote {run.path}" + (f"; {len(run.failed)} section(s) FAILED: {', '.join(run.failed)}" if run.failed else ""))
    return run


def _with_glossary(rendered: list[tuple[str, str, str, bool]], lang: str) -> list[tuple[str, str, str, bool]]:
    """Each section's first use of a glossary term defined in place (``<abbr>``, per section), and the
    glossary of every term the page used appended as its last section (see :mod:`attnkit.page.glossary`)."""
    used: list[str] = []
    out = []
    for sid, heading, body, bad in rendered:
        if not bad:
            body, found = annotate(body, lang)
            used += [k for k in found if k not in used]
        out.append((sid, heading, body, bad))
    entries = glossary_html(used, lang)
    if entries:
        out.append(("glossary", tr(lang, "Glossary", "术语表"), "<p class='note'>" + tr(
            lang, "Every term the sections above use, in the order they first use it; hover a dotted term above for its line here.",
            "上面各节用到的每个术语，按首次出现的顺序排列；在正文中把鼠标停在带虚线的术语上即可看到这里的解释。") + "</p>" + entries, False))
    return out


def _folder(path: str | Path | None) -> Path | None:
    """``path`` when it names an existing folder, else None (that part of the page is left out)."""
    return Path(path) if path is not None and Path(path).is_dir() else None


class _Eta:
    """Seconds left, from the sections' estimates scaled by how this machine compares with them."""

    def __init__(self, size: str):
        self.size, self.done_s, self.est_done = size, 0.0, 0.0

    def est(self, sec: StorySection) -> float:
        return sec.est_s.get(self.size, 5.0)

    def speed(self) -> float:
        # once enough has run to tell; clamped, so one odd section cannot swing it
        return min(4.0, max(0.5, self.done_s / self.est_done)) if self.est_done >= 30 else 1.0

    def computed(self, sec: StorySection, seconds: float) -> None:
        self.est_done += self.est(sec)
        self.done_s += seconds


def _compute_section(sec: StorySection, ctx: SectionContext, force: bool, run: ReportRun, eta: _Eta,
                     rest: list[StorySection], log: Callable[[str], None]) -> BaseException | None:
    """Compute (or load from the cache) one section's numbers into ``ctx.data``; the error it raised, or None."""
    t0 = time.perf_counter()
    heading = sec.heading("en")
    try:
        key = _key(sec, ctx)
        data = None if force or key is None else cache.load(ctx.out, sec.id, key)
        if data is not None:
            log(f"{heading}: {label('en', 'cached')}")
            run.cached.append(sec.id)
        else:
            log(f"{heading} ... (about {_fmt_s(eta.est(sec) * eta.speed())}; "
                f"ETA for the rest {_fmt_s(sum(eta.est(s) for s in rest) * eta.speed())})")
            data = sec.compute(ctx)
            if key is not None:
                cache.store(ctx.out, sec.id, key, data, list(data.get("_files", [])))
            eta.computed(sec, time.perf_counter() - t0)
        ctx.data[sec.id] = data
        error = None
        log(f"{heading}: computed in {time.perf_counter() - t0:.1f} s")
    except Exception as e:  # keep the other sections: the failure is shown in the page
        error = e
        error.trace = traceback.format_exc()  # type: ignore[attr-defined]
        log(f"{heading}: FAILED ({type(e).__name__}: {e})")
    run.seconds[sec.id] = round(time.perf_counter() - t0, 2)
    return error


def _render_section(sec: StorySection, ctx: SectionContext, lang: str, run: ReportRun, error: BaseException | None,
                    log: Callable[[str], None]) -> tuple[str, str, bool]:
    """One section's ``(heading, body, failed)`` in ``lang``, after every section has computed.
    A failure (of its compute, or of its render) becomes its body, escaped, with its traceback."""
    heading = sec.heading(lang)
    try:
        if error is not None:
            raise error
        return heading, _frame(sec, lang) + sec.render(ctx.data[sec.id], ctx, lang) + lesson_link(sec.lesson, ctx, lang), False
    except Exception as e:
        run.failed.append(sec.id)
        log(f"{sec.heading('en')}: FAILED ({type(e).__name__}: {e})")
        trace = getattr(e, "trace", None) or traceback.format_exc()
        return heading, _failure(e, lang) + f"<pre>{esc(trace)}</pre>", True


def _summary_part(summary: StorySection, ctx: SectionContext, lang: str, run: ReportRun) -> tuple[str, str, str, bool]:
    try:
        return summary.id, summary.heading(lang), _frame(summary, lang) + summary.render({}, ctx, lang), False
    except Exception as e:
        run.failed.append(summary.id)
        return summary.id, summary.heading(lang), _failure(e, lang), True


def _failure(e: Exception, lang: str) -> str:
    return f'<p class="fail">{esc(label(lang, "failed"))}: {esc(type(e).__name__)}: {esc(e)}</p>'


def _intro(size: str, lang: str) -> str:
    """The line under the page's title: what ran where, and how the page reads."""
    return (
        f'<p class="note">attnkit report · {esc(size)} · torch {esc(torch.__version__)} · Python {esc(platform.python_version())} · '
        f"{esc(platform.machine())}, {torch.get_num_threads()} threads · {time.strftime('%Y-%m-%d %H:%M:%S')}</p>"
        + tr(lang, "<p>Each section says which question it answers and how to read its figure; every number in the "
                   "prose is generated from the measurements of this run (or from the files it names).</p>",
             "<p>每一节先说明它回答的问题和如何读图；正文中的每个数字都由本次运行的测量结果（或注明的文件）生成。</p>")
    )


def _lesson_title(path: Path) -> str:
    """The lesson's heading: the first markdown title line (``# # Lesson 1 — ...``) of the file."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# # "):
            return line[4:].strip()
    return path.stem


def lesson_link(lesson: str, ctx: SectionContext, lang: str) -> str:
    """"Go deeper": the course lesson of a section, copied into the report folder and linked by a
    relative path (the page and its folder move together); without a course folder, its name only."""
    if not lesson:
        return ""
    src = ctx.course / lang / f"{lesson}.py" if ctx.course is not None else None
    if src is None or not src.is_file():
        text = tr(lang, f"course lesson <code>docs/course/en/{esc(lesson)}.py</code> of the attnkit repository",
                  f"attnkit 仓库中的课程 <code>docs/course/zh/{esc(lesson)}.py</code>")
    else:
        dest = Path(ctx.out) / "course" / lang / src.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
        text = f'<a href="course/{esc(lang)}/{esc(src.name)}">{esc(_lesson_title(src))}</a> ({esc(label(lang, "lesson_run"))})'
    return f'<p class="deeper"><b>{esc(label(lang, "deeper"))}:</b> {text}</p>'


def _frame(sec: StorySection, lang: str) -> str:
    """The question the section answers and how to read it, above its numbers."""
    q, r = (sec.question[1], sec.how_to_read[1]) if lang == "zh" else (sec.question[0], sec.how_to_read[0])
    html = f'<p class="q"><b>{esc(label(lang, "question"))}:</b> {q}</p>' if q else ""
    return html + (f'<p class="read"><b>{esc(label(lang, "read"))}:</b> {r}</p>' if r else "")


def build_report(out_dir: str | Path, sections: list | None = None, *, log=print, runs: str | Path | None = None,
                 run_missing: bool = True, lang: str = "en", force: bool = False, **kw) -> Path:
    """Write ``out_dir/index.html`` and return its path (see :func:`write_report`)."""
    return write_report(out_dir, sections, log=log, runs=runs, run_missing=run_missing, lang=lang, force=force, **kw).path


def report_command(out: str | Path = DEFAULT_OUT, *, runs=None, run_missing: bool = True, lang: str = "en",
                   force: bool = False, results: str | Path | None = "results") -> int:
    """``attnkit report``: 0 when every section ran, 1 when any failed (the page is written either way)."""
    try:
        check_out(out)  # an unwritable --out fails before minutes of work
    except SetupError as e:
        print(f"attnkit report: {e}", file=sys.stderr)
        return 2
    run = write_report(out, runs=runs, lang=lang, force=force, run_missing=run_missing, committed_results=results)
    return 1 if run.failed else 0
