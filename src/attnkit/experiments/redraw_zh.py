"""Draw again, in Chinese, the figures of committed experiment runs, from their ``results.json``.

A run saves each figure in English and, when a CJK font is installed, a Chinese copy in ``zh/``
beside it (:func:`attnkit.page.figures.draw_both`). Runs drawn before that, or on a machine without
the font, hold English figures only; the Chinese report page then shows the English figure with a
note. This command writes the missing Chinese copies of every figure whose numbers the run's folder
holds — its ``results.json`` and, for the vision run's MHSA2d and ViT maps, the weights stored in its
interactive viewers (``viewer_*.html``) — with the experiment's own plot code::

    python -m attnkit.experiments.redraw_zh                 # every run under results/
    python -m attnkit.experiments.redraw_zh --runs seq2seq/dates-full forecast/vic_elec-full
    python -m attnkit.experiments.redraw_zh --skip seq2seq/copy-quick

It prints, per run, the files written and the English figures left without a Chinese copy: those
drawn from numbers the run's folder does not hold. A run of this version stores the numbers of its
forecast curves (``settings[key]["curves"]``) and vision gates (``plotted_gates``) in
``results.json``; runs saved before that keep those figures in English until they are run again.
The English files are left as they are unless ``--english`` is given: then they are drawn again too,
by this version's plot code, so that both pages show the same figure (a run committed before a
plot's style changed otherwise keeps its older English drawing).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

from .lab.committed import committed_runs


def _figure_lists() -> dict[str, Callable]:
    """Experiment name -> ``run_figures(results) -> [(file name, draw(lang))]`` of its plots module
    (``results``: the run's :class:`Results`, whose ``run_dir`` is the run's folder)."""
    from .forecast.plots import run_figures as forecast
    from .seq2seq.plots import run_figures as seq2seq
    from .vision.plots import run_figures as vision

    return {"seq2seq": seq2seq, "forecast": forecast, "vision": vision}


def redraw_run(experiment: str, run, *, english: bool = False) -> tuple[list[Path], list[Path]]:
    """Write the Chinese copies of one committed run's figures (``run``: a :class:`Results` with
    ``run_dir``), and the English files too when ``english``; returns (files written, English PNGs
    still without a Chinese copy), relative to the run's folder."""
    from ..page.figures import cjk_font, language, zh_path
    from .lab.context import RunContext

    if cjk_font() is None:
        raise RuntimeError("no font covering Chinese was found; install one (Debian: apt-get install fonts-noto-cjk) "
                           "and run this command again")
    run_dir = Path(run.run_dir)
    ctx = RunContext(name=experiment, config={}, seeds=[], out=run_dir, show_progress=False)  # saves as the run did
    figures = _figure_lists().get(experiment, lambda results: [])(run)
    written = []
    for name, draw in figures:
        if english:
            written.append(ctx.save_figure(draw("en"), name).relative_to(run_dir))
        with language("zh"):
            written.append(ctx.save_figure(draw("zh"), zh_path(name)).relative_to(run_dir))
    left = sorted(p.relative_to(run_dir) for p in run_dir.glob("*.png") if not zh_path(p).is_file())
    return written, left


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnkit.experiments.redraw_zh", description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default="results", help="the folder of committed runs (default: results)")
    parser.add_argument("--runs", nargs="*", default=None, metavar="EXPERIMENT/RUN",
                        help="only these runs, e.g. seq2seq/dates-full (default: every run)")
    parser.add_argument("--skip", nargs="*", default=[], metavar="EXPERIMENT/RUN", help="leave these runs out")
    parser.add_argument("--english", action="store_true",
                        help="draw the English files again too (by this version's plot code, from the same results.json), "
                             "so that both languages show the same figure")
    args = parser.parse_args(argv)
    root = Path(args.results)
    if not root.is_dir():
        parser.error(f"--results: no folder {root}; pass the folder that holds <experiment>/<run>/results.json")
    from ..page.figures import cjk_font

    if cjk_font() is None:
        parser.exit(2, "no font covering Chinese was found; install one (Debian: apt-get install fonts-noto-cjk) and run again\n")
    found = {f"{exp.name}/{name}": (exp.name, run)
             for exp in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
             for name, run in committed_runs(exp.name, root).items()}
    unknown = [r for r in (args.runs or []) + args.skip if r not in found]
    if unknown:
        parser.error(f"no committed run {', '.join(unknown)} under {root}; the runs there are: {', '.join(found) or 'none'}")
    for key in args.runs if args.runs is not None else found:
        if key in args.skip:
            continue
        experiment, run = found[key]
        written, left = redraw_run(experiment, run, english=args.english)
        print(f"{key}: {len(written)} figure(s) written" + "".join(f"\n  + {p.as_posix()}" for p in written), flush=True)
        if left:
            print("  left in English (the run's folder holds no data to draw them from): " + ", ".join(p.as_posix() for p in left))
    return 0


if __name__ == "__main__":
    sys.exit(main())
