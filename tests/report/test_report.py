"""``attnkit report``: the page is written even when a section fails, user text is escaped, the
CLI drives it, and the sections that start processes or load the real model produce their parts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnkit.cli import main
from attnkit.page.story import StorySection
from attnkit.report import build as build_mod
from attnkit.report.build import build_report


def _section(sid: str, title: str, html: str | None) -> StorySection:
    def compute(ctx):
        if html is None:
            raise RuntimeError("<b>boom</b>")
        return {"html": html}

    return StorySection(sid, (title, title), ("", ""), ("", ""), compute, lambda d, ctx, lang: d["html"])


def test_a_failing_section_is_shown_and_the_rest_is_written(tmp_path):
    sections = [_section("a", "first", "<p>one</p>"), _section("b", "broken <x>", None), _section("c", "last", "<p>three</p>")]
    logs = []
    path = build_report(tmp_path, sections, log=logs.append)
    page = path.read_text(encoding="utf-8")
    assert "<p>one</p>" in page and "<p>three</p>" in page
    assert "This section failed: RuntimeError: &lt;b&gt;boom&lt;/b&gt;" in page  # escaped, not rendered
    assert "<b>boom</b>" not in page and "broken &lt;x&gt;" in page
    assert any("FAILED (RuntimeError" in line for line in logs)
    assert logs[-1].startswith(f"wrote {path}")


def test_sections_must_be_story_sections(tmp_path):
    with pytest.raises(TypeError, match="sections must be StorySection objects .* got tuple"):
        build_report(tmp_path, [("title", lambda out: "<p>old style</p>")], log=lambda m: None)


def test_cli_report_writes_index_with_real_sections(tmp_path, monkeypatch):
    from attnkit.report.contents import story

    fast = [s for s in story() if s.id in ("intro", "masks", "positions")]
    monkeypatch.setattr(build_mod, "default_sections", lambda: fast)
    assert main(["report", "--out", str(tmp_path)]) == 0
    page = (tmp_path / "index.html").read_text(encoding="utf-8")
    # intro: static-vs-dynamic weighting and the three steps; masks; positions
    assert "attention_numpy" in page and "masks.causal()" in page and page.count("data:image/png;base64,") == 4


def test_cli_backends_lists_every_backend(capsys):
    assert main(["backends"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert {"reference", "sdpa", "blockwise", "linear"} <= set(names)


def test_cli_rejects_an_unknown_suite():
    with pytest.raises(SystemExit):
        main(["bench", "--suite", "nope"])


def _torchrun(world_size: int, out_json: Path, timeout: float = 180.0) -> dict:
    """``attnkit.distributed.demo`` on ``world_size`` gloo ranks, started by torchrun as a user would."""
    import os
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world_size}",
           "-m", "attnkit.distributed.demo", "--causal", "--layout", "zigzag", "--json", str(out_json)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert p.returncode == 0 and out_json.exists(), (p.stderr or p.stdout)[-2000:]
    return json.loads(out_json.read_text())


def test_the_ring_demo_runs_under_torchrun_and_matches_sdpa(tmp_path):
    result = _torchrun(2, tmp_path / "w2.json")
    assert result["world_size"] == 2 and result["backend"] == "gloo" and result["causal"]
    assert result["max_abs_out_diff"] < 1e-5 and result["max_abs_dq_diff"] < 1e-5
    assert json.loads((tmp_path / "w2.json").read_text()) == result


def test_the_results_folder_travels_from_the_cli_to_the_sections(tmp_path, monkeypatch):
    from attnkit import cli

    seen = {}

    def fake_write_report(out, **kw):
        seen.update(kw)
        return build_mod.ReportRun(path=Path(out) / "index.html")

    monkeypatch.setattr(build_mod, "write_report", fake_write_report)
    assert cli.main(["report", "--out", str(tmp_path / "r"), "--results", str(tmp_path / "committed")]) == 0
    assert seen["committed_results"] == str(tmp_path / "committed")
    assert cli.main(["report", "--out", str(tmp_path / "r2")]) == 0
    assert seen["committed_results"] == "results"  # default: results/ of the current folder (a checkout)


def test_write_report_hands_the_folder_to_the_context_only_when_it_exists(tmp_path):
    from attnkit.report.build import write_report

    seen = []
    sec = StorySection("probe", ("Probe", "探针"), ("", ""), ("", ""), lambda ctx: {},
                       lambda d, ctx, lang: seen.append(ctx.committed_results) or "<p>ok</p>", cache=False)
    (tmp_path / "committed").mkdir()
    write_report(tmp_path / "a", [sec], committed_results=tmp_path / "committed", log=lambda m: None)
    write_report(tmp_path / "b", [sec], committed_results=tmp_path / "missing", log=lambda m: None)
    write_report(tmp_path / "c", [sec], committed_results=None, log=lambda m: None)
    assert seen == [tmp_path / "committed", None, None]
