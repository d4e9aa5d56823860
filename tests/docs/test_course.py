"""The course never rots: every lesson and every solution in docs/course/ runs as a plain script at
its small size and asserts the claims it prints (a parity within its dtype's rounding, a mask that
leaks nothing, a formula that matches a count), so a wrong step fails the run instead of printing a
wrong number; and the Chinese course mirrors the English one lesson for lesson and section for
section (the same files, the same number of markdown headings and exercises, the same code)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

COURSE = Path(__file__).resolve().parents[2] / "docs" / "course"
LESSONS = sorted(p.relative_to(COURSE) for p in COURSE.glob("*/**/*.py"))


def _headings(path: Path) -> list[str]:
    """The level of each markdown heading in the lesson's markdown cells, in order ("#", "##", ...)."""
    return re.findall(r"^# (#+) ", path.read_text(encoding="utf-8"), flags=re.M)


def test_course_exists_in_both_languages():
    en = sorted(p.relative_to(COURSE / "en") for p in (COURSE / "en").rglob("*.py"))
    zh = sorted(p.relative_to(COURSE / "zh") for p in (COURSE / "zh").rglob("*.py"))
    assert len([p for p in en if p.parent == Path(".")]) >= 1
    assert en == zh, "every English lesson and solution needs its Chinese twin (same file name)"


@pytest.mark.parametrize("rel", [p for p in LESSONS if p.parts[0] == "en"], ids=str)
def test_chinese_lesson_has_the_same_sections(rel):
    zh = COURSE / "zh" / Path(*rel.parts[1:])
    assert _headings(COURSE / rel) == _headings(zh), f"{zh} must mirror {rel}'s headings"
    assert re.search(r"[\u4e00-\u9fff]", zh.read_text(encoding="utf-8")), f"{zh} has no Chinese text"


@pytest.mark.parametrize("rel", LESSONS, ids=str)
def test_lesson_runs(rel, tmp_path):
    env = dict(os.environ, ATTNKIT_COURSE_SMALL="1", ATTNKIT_COURSE_OUT=str(tmp_path), MPLBACKEND="Agg")
    proc = subprocess.run(
        [sys.executable, str(COURSE / rel)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"{rel} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"


@pytest.mark.parametrize("rel", [p for p in LESSONS if p.parts[0] == "en"], ids=str)
def test_every_lesson_and_solution_asserts_its_claims(rel):
    """A script that only prints passes whatever it computes; each one checks what it shows."""
    asserts = [line for line in _code_without_comments(COURSE / rel) if re.match(r"\s*(assert |torch\.testing\.assert_close\(|np\.testing\.assert)", line)]
    assert len(asserts) >= (2 if rel.parts[1] == "solutions" else 3), f"{rel} asserts {len(asserts)} of its claims"


def test_every_lesson_has_exercises_and_solutions():
    for lesson in (COURSE / "en").glob("*.py"):
        text = lesson.read_text(encoding="utf-8")
        n = len(re.findall(r"^# \d\. ", text.split("## Exercises")[-1], flags=re.M))
        assert "## Exercises" in text and 2 <= n <= 4, f"{lesson.name}: 2–4 numbered exercises under '## Exercises'"
        assert (COURSE / "en" / "solutions" / lesson.name).exists(), f"{lesson.name} has no solutions file"


def _code_without_comments(path: Path) -> list[str]:
    """The code lines of a lesson with comments, markdown cells and the solutions' docstring removed."""
    text = path.read_text(encoding="utf-8")
    text = re.sub(r'^""".*?"""', "", text, count=1, flags=re.S)  # a solution's translated docstring
    code, in_markdown = [], False
    for line in text.splitlines():
        if line.startswith("# %%"):
            in_markdown = "[markdown]" in line
            continue
        if in_markdown or line.lstrip().startswith("#"):
            continue
        line = re.sub(r"\s+# .*$", "", line).rstrip()
        line = re.sub(r'"[^"\n]*"|\'[^\'\n]*\'', '""', line)  # printed text may be translated too
        if line:
            code.append(line)
    return code


@pytest.mark.parametrize("rel", [p for p in LESSONS if p.parts[0] == "en"], ids=str)
def test_chinese_lesson_runs_the_same_code(rel):
    """The Chinese course translates prose, comments and printed text, never the code."""
    zh = COURSE / "zh" / Path(*rel.parts[1:])
    assert _code_without_comments(COURSE / rel) == _code_without_comments(zh), f"{zh} must run the same code as {rel}"


def test_every_lesson_states_its_question_and_is_indexed():
    readme = {lang: (COURSE / name).read_text(encoding="utf-8") for lang, name in (("en", "README.md"), ("zh", "README.zh.md"))}
    for lang, marker in (("en", "Question this lesson answers"), ("zh", "本课回答的问题")):
        for lesson in (COURSE / lang).glob("*.py"):
            head = lesson.read_text(encoding="utf-8")[:3000]
            assert marker in head, f"{lesson} must open by saying which question it answers ({marker!r})"
            assert f"{lang}/{lesson.name}" in readme[lang], f"{lesson.name} is missing from the {lang} course index"
