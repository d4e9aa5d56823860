"""``attnkit report``: run every experiment at its quick default and write one HTML page.

Each section is a function returning HTML; a section that fails is shown as failed with its error
(the rest of the report still gets written), because an hour of experiments should not be lost to
one broken plot.
"""

from __future__ import annotations

import platform
import time
import traceback
from pathlib import Path
from typing import Callable

import torch

from .experiments_section import DEFAULT_RUNS, experiment_sections
from .html import esc, page

# (title, fn(out) -> html); fn may instead return an object with .title and .html (an experiment's
# Section) whose title then replaces the planned one
Section = tuple[str, Callable[[Path], object]]


def default_sections(runs: str | Path = DEFAULT_RUNS, run_missing: bool = False) -> list[Section]:
    """Every section, cheapest first, then one per registered experiment (from its latest results
    under ``runs``, see :mod:`.experiments_section`). A section whose optional extra (matplotlib,
    transformers and the MiniLM package) is missing shows its ImportError in the page; the rest is
    still written."""
    from .backends_section import attention_map_section, backends_section
    from .bench_section import bench_section
    from .decoding_section import decoding_section
    from .ring_section import ring_section

    return [
        ("Backends and dispatch", lambda out: backends_section()),
        ("A small attention map", lambda out: attention_map_section()),
        ("Backend benchmark (quick)", bench_section),
        ("Decoding with a KV cache", decoding_section),
        ("Ring attention across processes (torchrun, gloo)", ring_section),
        *experiment_sections(runs, run_missing=run_missing),
    ]


def build_report(out_dir: str | Path, sections: list[Section] | None = None, *, log=print,
                 runs: str | Path | None = None, run_missing: bool = False) -> Path:
    """Write ``out_dir/index.html``; ``runs`` is where experiment results are read (default ``runs/``);
    ``run_missing`` runs the quick configuration of experiments that have none there."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rendered = []
    if sections is not None:
        secs = sections
    else:
        secs = default_sections() if runs is None and not run_missing else default_sections(runs or DEFAULT_RUNS, run_missing)
    for i, (title, fn) in enumerate(secs, 1):
        log(f"[{i}/{len(secs)}] {title} ...")
        t0 = time.perf_counter()
        try:
            body = fn(out)
            if hasattr(body, "html") and hasattr(body, "title"):
                title, body = body.title, body.html
            status = f"done in {time.perf_counter() - t0:.1f} s"
        except Exception as e:  # keep the other sections: show the failure in the page
            body = f'<p class="fail">This section failed: {esc(type(e).__name__)}: {esc(e)}</p><pre>{esc(traceback.format_exc())}</pre>'
            status = f"FAILED ({type(e).__name__}: {e})"
        log(f"[{i}/{len(secs)}] {title}: {status}")
        rendered.append((title, body))
    intro = (
        f'<p class="note">attnkit report · torch {esc(torch.__version__)} · Python {esc(platform.python_version())} · '
        f"{esc(platform.machine())}, {torch.get_num_threads()} threads · {time.strftime('%Y-%m-%d %H:%M:%S')}</p>"
    )
    path = out / "index.html"
    path.write_text(page("attnkit report", rendered, intro=intro), encoding="utf-8")
    log(f"wrote {path}")
    return path
