"""The report's prose sections (``attnkit.report.sections``) measure nothing: each is a module of
plain facts and a ``render(ctx, lang)``, imports neither torch nor NumPy nor the library below the
experiments (a section that measures is an experiment folder), and is listed in ``PROSE``; the
older-than-the-Transformer section reads the seq2seq section's numbers in both languages."""

from __future__ import annotations

import ast
import json
import pkgutil
from pathlib import Path

import pytest

from attnkit.page.story import SectionContext
from attnkit.report import sections
from attnkit.report.build import write_report
from attnkit.report.contents import prose_section, story
from attnkit.report.sections import older

FOLDER = Path(sections.__file__).parent
ALLOWED = ("attnkit.page", "attnkit.report", "attnkit.experiments.lab")  # the writing kit, the report, reading results


def _imports(path: Path) -> list[str]:
    """Absolute dotted names of every module ``path`` imports (relative ones resolved in attnkit.report.sections)."""
    package = ["attnkit", "report", "sections"]
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            names.append(".".join(base + ([node.module] if node.module else [])))
    return names


def test_every_prose_module_is_listed():
    files = sorted(m.name for m in pkgutil.iter_modules([str(FOLDER)]))
    assert files == sorted(m.__name__.rsplit(".", 1)[1] for m in sections.PROSE)


@pytest.mark.parametrize("module", sections.PROSE, ids=lambda m: m.__name__)
def test_a_prose_module_states_its_facts_and_computes_nothing(module):
    for attr in ("TITLE", "QUESTION", "HOW_TO_READ"):
        pair = getattr(module, attr)
        assert isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(s, str) and s for s in pair), attr
    assert isinstance(module.ID, str) and isinstance(module.ORDER, (int, float)) and isinstance(module.LESSON, str)
    assert callable(module.render) and not hasattr(module, "compute")
    sec = prose_section(module)
    assert sec.cache is False and sec.compute(None) == {}


@pytest.mark.parametrize("path", sorted(FOLDER.glob("*.py")), ids=lambda p: p.name)
def test_a_prose_module_imports_no_measuring_code(path):
    bad = [n for n in _imports(path) if n.split(".")[0] in ("torch", "numpy")
           or (n.startswith("attnkit") and not any(n == a or n.startswith(a + ".") for a in ALLOWED))]
    assert bad == [], f"{path.name} imports {bad}: a section that measures is an experiment (attnkit.experiments.<name>)"


def test_the_import_check_resolves_relative_imports(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from ...core import masks\nfrom ..experiment_section import load_results\nimport torch\n")
    assert _imports(probe) == ["attnkit.core", "attnkit.report.experiment_section", "torch"]


def test_measuring_sections_are_experiments():
    ids = {s.id for s in story()}
    prose = {m.ID for m in sections.PROSE}
    assert {"intro", "masks", "cost", "positions", "kv_cache"} <= ids - prose


def _seq2seq_results(folder: Path) -> dict:
    bucket = lambda x: {"metrics": {"exact": x}}  # noqa: E731
    models = {"rnn": {"params": 1000, "overall": {"exact": {"mean": 40.0}}, "buckets": [bucket(70.0), bucket(12.5)]},
              "bahdanau": {"params": 1100, "overall": {"exact": 80.0}, "buckets": [bucket(90.0), bucket(66.25)]}}
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"preset": "quick", "results": {"metric_names": ["exact"], "models": models}}))
    return {"results": (folder / "results.json").as_posix()}


def test_older_reads_the_seq2seq_numbers_in_both_languages(tmp_path):
    ctx = SectionContext(out=tmp_path)
    ctx.data["seq2seq"] = _seq2seq_results(tmp_path / "s2s")
    en, zh = older.render(ctx, "en"), older.render(ctx, "zh")
    assert "scored 40.0 (exact) overall and 12.5 on the longest sources" in en and "scored 80.0 and 66.2" in en
    assert "总体得分 40.0（exact）" in zh and "1,100" in zh
    assert older.summary(ctx, "en")[0] == "longest sources: RNN 12.5 vs RNN+attention (2014) 66.2"
    empty = SectionContext(out=tmp_path)
    assert "attnkit experiment seq2seq" in older.render(empty, "en") and older.summary(empty, "en") is None


def test_a_prose_section_on_the_page_is_rendered_each_time(tmp_path):
    run = write_report(tmp_path, [prose_section(older)], log=lambda m: None)
    page = run.path.read_text(encoding="utf-8")
    assert run.failed == [] and run.cached == [] and "Misconception: attention began with the Transformer" in page
    assert not (tmp_path / ".cache" / "misconception_older.json").exists()


def test_a_transformer_below_a_recurrent_model_carries_the_caveat():
    # the quick run the page once quoted: Transformer 29.0 below the RNN without attention 31.7, with no word
    by = {"rnn": {"overall": 31.7}, "luong": {"overall": 20.0}, "transformer": {"overall": 29.0}}
    en = older._transformer_caveat(by, {"std": {"transformer": 1.2}}, "en")
    zh = older._transformer_caveat(by, {"std": {"transformer": 1.2}}, "zh")
    assert "scores 29.0 ± 1.2, below" in en and "not that the Transformer is worse" in en
    assert older.LABELS["rnn"][0] in en and older.LABELS["luong"][0] not in en  # only the models above it
    assert "29.0 ± 1.2" in zh and "而不是 Transformer 更差" in zh
    assert older._transformer_caveat({**by, "transformer": {"overall": 50.0}}, {"std": {}}, "en") == ""
