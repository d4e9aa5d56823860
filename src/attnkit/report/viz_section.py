"""Compatibility shim: the MiniLM attention-maps section now comes from the ``minilm_maps``
experiment through the registry (:mod:`.experiments_section`); this runs that experiment into
``out`` and returns its section's HTML, for callers of the old function."""

from __future__ import annotations

from pathlib import Path


def viz_section(out: Path) -> str:
    from ..experiments import Results, RunContext, get

    exp = get("minilm_maps")
    ctx = RunContext(name=exp.name, config=dict(exp.quick), seeds=[0], out=Path(out), show_progress=False)
    results = exp.run(ctx)
    return exp.report(Results(results, Path(out), {}), Path(out), "en").html
