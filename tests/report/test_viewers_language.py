"""The interactive viewers speak the page's language: the Chinese report embeds Chinese viewers and the
English report English ones, written by one code path (``attnkit.inspect.viewer`` with ``lang``).

A viewer's words are checked where a reader meets them: the page's markup outside its script and style
(headings, labels, ARIA labels), the words element the script reads, and the script itself, which must
carry no interface words of its own (else a Chinese page could still show English ones).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from attnkit.inspect.viewer import _asset, render_html
from attnkit.inspect.viewer_language import language_copy, relang_html
from attnkit.inspect.viewer_text import TEXT

_WORDS = re.compile(r'<script type="application/json" id="ak-ui">(.*?)</script>', re.S)
_DATA = re.compile(r'<script type="application/json" id="ak-data">(.*?)</script>', re.S)
_CODE = re.compile(r"<(script|style)\b[^>]*>.*?</\1>", re.S)
_HAN = re.compile(r"[\u4e00-\u9fff]")
_KEYS = {"layer", "head", "label"}  # the diagnostics' column keys the script looks up (shown through UI.columns)


def _pieces(lang: str) -> set[str]:
    """The interface words of ``lang``: each skeleton string, and each template's text between its holes
    (pieces of three characters or more that hold a letter or a Han character)."""
    t = TEXT[lang]
    out = {v for k, v in t["page"].items() if k != "html_lang"}
    for template in t["script"].values():
        out |= {p.strip(" .;:,()（），；：。") for p in re.split(r"\{\w+\}", template)}
    out |= set(t["columns"].values()) | set(t["labels"].values())
    return {p for p in out if len(p) >= 3 and re.search(r"[A-Za-z\u4e00-\u9fff]", p)}


def _has(text: str, piece: str) -> bool:
    """``piece`` in ``text``, as a whole word where it is English ("head" is not in "ak-head-view")."""
    return re.search(rf"(?<![\w-]){re.escape(piece)}(?![\w-])", text) is not None if piece.isascii() else piece in text


def _check_viewer(page: str, lang: str) -> None:
    """``page`` shows ``lang``'s words and none of the other language's interface words."""
    other = "zh" if lang == "en" else "en"
    markup = _CODE.sub("", page)
    words = json.loads(_WORDS.search(page).group(1))
    assert words == {k: TEXT[lang][k] for k in ("script", "columns", "labels", "phrases")}
    assert f'<html lang="{TEXT[lang]["page"]["html_lang"]}">' in page
    assert TEXT[lang]["page"]["head_view"] in markup and TEXT[lang]["page"]["matrix_view"] in markup
    shown = [re.sub(r"<[^>]+>", " ", markup), *re.findall(r'aria-label="([^"]*)"', markup)]
    shown += [re.sub(r"\{\w+\}", "", v) for part in words.values() for v in part.values()]  # words, not keys or holes
    leaked = sorted(p for p in _pieces(other) if any(_has(s, p) for s in shown))
    assert leaked == [], f"{lang} viewer shows {other} words: {leaked}"


def _weights() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(2, 5, 5, generator=g).softmax(-1) for _ in range(2)]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_render_html_speaks_one_language(lang):
    _check_viewer(render_html(_weights(), list("abcde"), lang=lang), lang)


def test_the_script_carries_no_words_of_its_own():
    literals = re.findall(r'"((?:[^"\\]|\\.)*)"', _asset("viewer.js"))
    for lang in ("en", "zh"):
        found = sorted(p for p in _pieces(lang) for s in literals if _has(s, p) and s not in _KEYS)
        assert found == [], f"viewer.js holds {lang} interface words: {found}"
    assert not _HAN.search(_asset("viewer.js"))


def test_relang_keeps_the_weights_and_changes_only_the_words():
    en = render_html(_weights(), list("abcde"), title="t")
    zh = relang_html(en, "zh")
    _check_viewer(zh, "zh")
    assert _DATA.search(zh).group(1) == _DATA.search(en).group(1)
    assert relang_html(zh, "en") == en  # there and back: the same page
    renamed = relang_html(en, "zh", title="标题")
    assert json.loads(_DATA.search(renamed).group(1))["title"] == "标题" and "<title>标题</title>" in renamed
    with pytest.raises(ValueError, match="not an attnkit viewer"):
        relang_html("<html></html>", "zh")
    with pytest.raises(ValueError, match="lang must be one of"):
        relang_html(en, "fr")


def test_language_copy_never_overwrites_the_original(tmp_path):
    src = tmp_path / "viewer.html"
    src.write_text(render_html(_weights(), title="t"), encoding="utf-8")
    before = src.read_text(encoding="utf-8")
    zh = language_copy(src, tmp_path, "zh")
    assert zh.name == "viewer.zh.html" and src.read_text(encoding="utf-8") == before
    assert language_copy(src, tmp_path, "en") == src  # already there, in English
    assert language_copy(src, tmp_path / "page", "en").read_text(encoding="utf-8") == before


def _viewer_pages(page: Path) -> list[Path]:
    """The viewer pages the report ``page`` links or frames (files holding a viewer's data element)."""
    html = page.read_text(encoding="utf-8")
    targets = {page.parent / t for t in re.findall(r'(?:href|src)="([^"#:]+\.html)"', html)}
    return sorted(p for p in targets if p.is_file() and 'id="ak-data"' in p.read_text(encoding="utf-8"))


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_report_embeds_viewers_in_its_language(tiny_report, lang):
    viewers = _viewer_pages(tiny_report[f"{lang}_path"])
    assert len(viewers) >= 3, f"the {lang} page links {len(viewers)} viewers: {viewers}"  # MiniLM, MHSA2d, ViT
    for v in viewers:
        _check_viewer(v.read_text(encoding="utf-8"), lang)
    if lang == "zh":
        assert not _HAN.search(" ".join(v.name for v in viewers)) and all(v.name.endswith(".zh.html") for v in viewers)


def test_every_reason_a_head_can_get_reads_in_chinese():
    """The diagnostics' reason cells are English sentences of HeadThresholds.label; the Chinese viewer rewrites them
    with its phrases (viewer.js ``rephrase``: longest phrase first), leaving numbers and symbols only."""
    from attnkit.inspect.head_summary import HeadThresholds

    nan = float("nan")
    base = {"fixed_mass": 0.3, "fixed_position": 0, "entropy": 0.5, "previous_mass": 0.1, "next_mass": 0.1, "self_mass": 0.1,
            "special_mass": None, "learned_sink_mass": None}
    cases = [{"fixed_mass": nan}, {"fixed_mass": 0.9}, {"special_mass": 0.9}, {"learned_sink_mass": 0.9}, {"entropy": 0.95},
             {"previous_mass": 0.7}, {"next_mass": 0.7}, {"self_mass": 0.7}, {}]
    phrases = sorted(TEXT["zh"]["phrases"].items(), key=lambda kv: -len(kv[0]))
    for case in cases:
        _, reason = HeadThresholds().label({**base, **case})
        for en, zh in phrases:
            reason = reason.replace(en, zh)
        assert not re.search(r"[A-Za-z]{2,}", re.sub(r"token|CLS|SEP", "", reason)), reason  # token: the page's word in Chinese too
