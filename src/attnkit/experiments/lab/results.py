"""What a run leaves behind and how it is read back: the ``results.json`` schema, :class:`Results`
(a run's numbers with its folder), :class:`Section` (a report section's heading and HTML), and
:func:`latest_results` (the newest run of an experiment under a runs folder, where ``attnkit
experiment`` writes and ``attnkit report`` looks)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

SCHEMA_VERSION = 1
RESULTS_FILE = "results.json"


@dataclass
class Section:
    """One section of ``attnkit report``: a heading and a self-contained HTML body."""

    title: str
    html: str


class Results(dict):
    """What an experiment's ``run`` returned, as handed to its ``report``; a plain dict plus
    ``run_dir`` (the folder of the run, where its PNGs and checkpoints are) and ``meta`` (the rest of
    results.json: config, seeds, env, times)."""

    def __init__(self, results: dict, run_dir: Path, meta: dict):
        super().__init__(results)
        self.run_dir = Path(run_dir)
        self.meta = meta

    @classmethod
    def from_doc(cls, doc: dict, run_dir: Path) -> "Results":
        """From a parsed results.json ``doc`` found in ``run_dir``."""
        return cls(doc["results"], run_dir, {k: v for k, v in doc.items() if k != "results"})


def is_partial(doc: dict) -> bool:
    """True for the results of a run that is one part of a larger one (``"partial": true`` in its
    results, e.g. a worker that trained only some seeds): not a result to show on its own."""
    return bool(doc["results"].get("partial"))


def read_doc(path: Path, experiment: str) -> dict | None:
    """The parsed results.json at ``path`` when it is this schema's and ``experiment``'s, else None
    (an unreadable file, another experiment's or another schema's is not this experiment's result)."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if (not isinstance(doc, dict) or doc.get("experiment") != experiment or doc.get("schema_version") != SCHEMA_VERSION
            or not isinstance(doc.get("results"), dict)):
        return None
    return doc


def latest_results(name: str, runs: str | Path) -> tuple[dict, Path] | None:
    """The newest (by ``finished``) complete results.json of experiment ``name`` anywhere under
    ``runs`` (partial ones, see :func:`is_partial`, are skipped): ``(doc, run folder)``, or None."""
    best = None
    root = Path(runs)
    for path in root.rglob(RESULTS_FILE) if root.is_dir() else ():
        doc = read_doc(path, name)
        if doc is not None and not is_partial(doc) and (best is None or doc.get("finished", "") > best[0].get("finished", "")):
            best = (doc, path.parent)
    return best
