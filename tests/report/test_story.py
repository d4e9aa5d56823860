"""The report's machinery on small fake sections: order, cache (reuse, rerun on changed inputs or
code, --force), a failed section shown with its error and a non-zero exit, both languages, and the
real story's section list."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from attnkit.cli import main
from attnkit.report import build as build_mod
from attnkit.report import cache
from attnkit.report.build import write_report
from attnkit.page.story import StorySection

SECTION_RE = re.compile(r'<section id="([^"]+)" data-section="[^"]+" data-failed="(\d)"><h2>([^<]*)</h2>')


def sections_of(page: str) -> list[tuple[str, str, str]]:
    return SECTION_RE.findall(page)


def fake_story(calls: dict, inputs: dict, fail: bool = False) -> list[StorySection]:
    def make(sid):
        def compute(ctx):
            calls[sid] = calls.get(sid, 0) + 1
            if fail and sid == "b":
                raise RuntimeError("<b>boom</b>")
            return {"value": inputs.get(sid, 0) * 2}

        return StorySection(sid, (f"Title {sid}", f"标题 {sid}"), (f"question {sid}", f"问题 {sid}"), ("read", "读图"), compute,
                            lambda d, ctx, lang: f"<p>{'值' if lang == 'zh' else 'value'} {d['value']}</p>",
                            inputs=lambda ctx, sid=sid: {"x": inputs.get(sid, 0)},
                            summary=lambda d, ctx, lang: (str(d["value"]), "m"))

    return [make("a"), make("b"), make("c")]


def test_sections_in_order_each_with_its_question(tmp_path):
    calls = {}
    run = write_report(tmp_path, fake_story(calls, {"a": 1, "b": 2, "c": 3}), log=lambda m: None)
    page = run.path.read_text(encoding="utf-8")
    assert [s[0] for s in sections_of(page)] == ["a", "b", "c"]
    assert all(f == "0" for _, f, _ in sections_of(page))
    assert "question b" in page and "value 4" in page and run.failed == []


def test_second_run_reuses_the_cache_and_a_changed_input_reruns_only_its_section(tmp_path):
    calls, inputs = {}, {"a": 1, "b": 2, "c": 3}
    write_report(tmp_path, fake_story(calls, inputs), log=lambda m: None)
    run = write_report(tmp_path, fake_story(calls, inputs), log=lambda m: None)
    assert calls == {"a": 1, "b": 1, "c": 1} and run.cached == ["a", "b", "c"]
    inputs["b"] = 5
    run = write_report(tmp_path, fake_story(calls, inputs), log=lambda m: None)
    assert calls == {"a": 1, "b": 2, "c": 1} and run.cached == ["a", "c"]
    assert "value 10" in run.path.read_text(encoding="utf-8")
    run = write_report(tmp_path, fake_story(calls, inputs), force=True, log=lambda m: None)
    assert calls == {"a": 2, "b": 3, "c": 2} and run.cached == []


def test_changed_code_changes_the_key(tmp_path, monkeypatch):
    key = cache.section_key("a", {"x": 1}, ("attnkit.page.html",))
    assert key == cache.section_key("a", {"x": 1}, ("attnkit.page.html",))
    monkeypatch.setattr(cache, "source_hash", lambda modules: "edited")
    assert cache.section_key("a", {"x": 1}, ("attnkit.page.html",)) != key


def test_a_removed_figure_reruns_its_section(tmp_path):
    calls = {}

    def compute(ctx):
        calls["n"] = calls.get("n", 0) + 1
        p = Path(ctx.out) / "fig" / "x.png"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"png")
        return {"_files": [ctx.rel(p)]}

    sec = [StorySection("fig", ("F", "F"), ("", ""), ("", ""), compute, lambda d, ctx, lang: "ok")]
    write_report(tmp_path, sec, log=lambda m: None)
    (tmp_path / "fig" / "x.png").unlink()
    write_report(tmp_path, sec, log=lambda m: None)
    assert calls["n"] == 2


def test_a_failed_section_is_shown_escaped_not_cached_and_exits_non_zero(tmp_path, monkeypatch):
    calls, logs = {}, []
    run = write_report(tmp_path, fake_story(calls, {}, fail=True), log=logs.append)
    page = run.path.read_text(encoding="utf-8")
    assert run.failed == ["b"]
    assert [(i, f) for i, f, _ in sections_of(page)] == [("a", "0"), ("b", "1"), ("c", "0")]
    assert "RuntimeError: &lt;b&gt;boom&lt;/b&gt;" in page and "<b>boom</b>" not in page
    assert any("FAILED (RuntimeError" in line for line in logs) and "FAILED: b" in logs[-1]
    write_report(tmp_path, fake_story(calls, {}, fail=True), log=lambda m: None)
    assert calls["b"] == 2 and calls["a"] == 1  # the failure was retried, the rest reused
    # the command: the page is written and the exit status is 1
    monkeypatch.setattr(build_mod, "default_sections", lambda: fake_story({}, {}, fail=True))
    assert main(["report", "--out", str(tmp_path / "cli")]) == 1
    assert (tmp_path / "cli" / "index.html").exists()
    monkeypatch.setattr(build_mod, "default_sections", lambda: fake_story({}, {}))
    assert main(["report", "--out", str(tmp_path / "cli2"), "--lang", "zh", "--force"]) == 0


def test_chinese_page_has_the_same_sections_and_numbers(tmp_path):
    calls, inputs = {}, {"a": 1, "b": 2, "c": 3}
    en = write_report(tmp_path, fake_story(calls, inputs), log=lambda m: None).path.read_text(encoding="utf-8")
    zh = write_report(tmp_path, fake_story(calls, inputs), lang="zh", log=lambda m: None).path.read_text(encoding="utf-8")
    assert [s[0] for s in sections_of(en)] == [s[0] for s in sections_of(zh)]
    assert '<html lang="zh">' in zh and "标题 b" in zh and "值 4" in zh and "问题 a" in zh
    assert calls == {"a": 1, "b": 1, "c": 1}  # the Chinese page reused the English run's numbers


def test_bad_lang_and_size_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="lang must be one of en, zh"):
        write_report(tmp_path, [], lang="fr")
    with pytest.raises(ValueError, match="size must be one of"):
        write_report(tmp_path, [], size="huge")
    with pytest.raises(SystemExit):
        main(["report", "--lang", "fr"])


def test_the_story_order_and_both_languages_for_every_section():
    from attnkit.report.contents import story

    ids = [s.id for s in story()]
    want = ["intro", "seq2seq", "minilm_maps", "masks", "cost", "positions", "kv_cache", "vision", "forecast",
            "misconception_older", "misconceptions_qkv", "misconceptions_explain", "misconceptions_long", "misconceptions_heads"]
    # new experiment folders take their own places in between; these keep their order, intro first, summary last
    assert [i for i in ids if i in want] == want and ids[0] == "intro" and ids[-1] == "summary"
    for s in story():
        assert s.title[0] and s.title[1] and s.title[0] != s.title[1], s.id
        if s.id in want:
            assert s.question[0] and s.question[1] and s.how_to_read[0] and s.how_to_read[1], s.id


def test_committed_results_are_read_from_the_given_folder_only(tmp_path):
    from attnkit.experiments.lab.committed import committed

    assert committed("decoding.json", None) is None
    assert committed("decoding.json", tmp_path) is None
    (tmp_path / "decoding.json").write_text("{}")
    assert committed("decoding.json", tmp_path) == tmp_path / "decoding.json"
    assert "parents[" not in Path(__import__("attnkit.experiments.lab.committed", fromlist=["x"]).__file__).read_text()


def test_an_unwritable_out_fails_before_any_work(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(build_mod, "default_sections", lambda: pytest.fail("no section may run"))
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["report", "--out", str(f)]) == 2
    assert "is an existing file" in capsys.readouterr().err


def test_a_broken_summary_row_fails_the_summary_section(tmp_path):
    from attnkit.report.contents import summary_render

    secs = fake_story({}, {"a": 1})
    secs[1].summary = lambda d, ctx, lang: d["missing-key"]
    secs.append(StorySection("summary", ("Summary", "总结"), ("", ""), ("", ""), lambda ctx: {}, summary_render(secs), cache=False))
    run = write_report(tmp_path, secs, log=lambda m: None)
    page = run.path.read_text(encoding="utf-8")
    assert run.failed == ["summary"] and "summary rows failed: b: KeyError" in page
    secs[1].summary = lambda d, ctx, lang: (f"v={d['value']}", "meaning")
    run = write_report(tmp_path, secs, lang="zh", log=lambda m: None)  # from the cache: the data went through JSON
    page = run.path.read_text(encoding="utf-8")
    assert run.failed == [] and "v=0" in page and "<th>本次测得</th>" in page
