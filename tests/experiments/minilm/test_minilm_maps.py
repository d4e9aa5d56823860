"""The ``minilm_maps`` experiment's report section: the attention viewer embedded and the focus table.

Run the way the report runs every experiment (through the registry), on its quick configuration;
the MiniLM weights come from the local Hugging Face cache (skipped where transformers or
matplotlib are missing).
"""

from __future__ import annotations

from pathlib import Path

import pytest


def test_minilm_maps_section_embeds_the_viewer_and_the_focus_table(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("matplotlib")
    from attnkit.experiments import Results, RunContext, get

    exp = get("minilm_maps")
    ctx = RunContext(name=exp.name, config=dict(exp.quick), seeds=[0], out=Path(tmp_path), show_progress=False)
    html = exp.report(Results(exp.run(ctx), Path(tmp_path), {}), Path(tmp_path), "en").html
    assert '<iframe src="viz/attention.html"' in html
    assert (tmp_path / "viz" / "attention.html").exists()
    assert "Where <q>it</q> (position 10) looks" in html and "head 11: animal" in html
    # under the table, what it shows, read from its numbers: "it" settles on "animal" from layer 3 on
    assert "From layer 3 on, <q>it</q> gives its largest weight among the words of the sentence to <q>animal</q>" in html


def test_the_figures_are_drawn_in_both_languages_and_the_chinese_section_shows_the_chinese_ones(tmp_path):
    import re

    pytest.importorskip("transformers")
    pytest.importorskip("matplotlib")
    from attnkit.experiments import Results, RunContext, get
    from attnkit.page.figures import cjk_font, zh_path

    if cjk_font() is None:
        pytest.skip("no CJK font on this machine (apt-get install fonts-noto-cjk)")
    exp = get("minilm_maps")
    ctx = RunContext(name=exp.name, config={**exp.quick, **exp.tiny}, seeds=[0], out=Path(tmp_path), show_progress=False)
    results = Results(exp.run(ctx), Path(tmp_path), {})
    for key in ("heads_grid", "focus", "diagnostics_png"):  # the figures the section shows
        en = tmp_path / results["files"][key]
        assert zh_path(en).is_file() and zh_path(en).read_bytes() != en.read_bytes(), key
    html = exp.report(results, Path(tmp_path), "zh").html
    shown = re.findall(r'<img alt="([^"]*)"[^>]*data-figure-lang="(\w+)"', html)
    assert sorted(alt for alt, _ in shown) == sorted(["层 × 头网格", "关注的 token", "每个头的诊断"])
    assert all(lang == "zh" for _, lang in shown) and "figure-en" not in html
