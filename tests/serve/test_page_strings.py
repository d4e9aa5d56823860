"""The page's files: every UI string exists in Chinese and English, every key the page uses is
defined, Chinese is the default, and nothing is loaded from outside the package."""

from __future__ import annotations

import json
import re
from importlib import resources

from attnkit.inspect.head_summary import HEAD_LABELS
from attnkit.serve.decode_api import self_attention_kinds

ASSETS = resources.files("attnkit.serve") / "assets"
STRINGS = json.loads((ASSETS / "i18n.json").read_text(encoding="utf-8"))
HTML = (ASSETS / "index.html").read_text(encoding="utf-8")
JS = (ASSETS / "serve.js").read_text(encoding="utf-8")
CJK = re.compile(r"[\u4e00-\u9fff]")


def used_keys() -> set[str]:
    """Keys the page looks up: data-i18n* attributes of the HTML, t("...") calls of the script."""
    html = set(re.findall(r'data-i18n(?:-title|-placeholder)?="([^"]+)"', HTML))
    js = set(re.findall(r'\bt\("([^"]+)"', JS))
    prefixes = {k for k in js if k.endswith("_")}  # t("label_" + name): the names are checked below
    return html | (js - prefixes)


def test_both_languages_have_the_same_non_empty_keys():
    assert set(STRINGS) == {"zh", "en"}
    assert set(STRINGS["zh"]) == set(STRINGS["en"])
    for lang, table in STRINGS.items():
        assert all(isinstance(v, str) and v.strip() for v in table.values()), lang


def test_every_key_the_page_uses_is_defined():
    missing = used_keys() - set(STRINGS["en"])
    assert not missing, missing
    assert len(used_keys()) > 40  # the scan finds the page's keys (a broken regex would find none)


def test_head_labels_and_cache_kinds_are_translated():
    for label in HEAD_LABELS:
        assert f"label_{label}" in STRINGS["en"]
    for kind in self_attention_kinds():
        assert f"kind_{kind}" in STRINGS["en"]


def test_chinese_is_natural_chinese_and_english_has_none():
    """Prose strings of the Chinese table contain Chinese; the English table contains no Chinese
    except the language button, which names the other language in its own script."""
    code_like = {"default_text", "default_prompt", "lang_button"}
    for key, zh in STRINGS["zh"].items():
        if key not in code_like:
            assert CJK.search(zh), key
    assert [k for k, v in STRINGS["en"].items() if CJK.search(v)] == ["lang_button"]


def test_chinese_by_default_and_nothing_from_outside():
    assert '<html lang="zh-CN">' in HTML
    for name in ("index.html", "serve.js", "serve.css"):
        text = (ASSETS / name).read_text(encoding="utf-8")
        assert not re.search(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text, re.I), name  # no CDN, no remote URL
    for hook in ('id="text"', 'id="run"', 'id="lang"'):
        assert hook in HTML
    assert len(re.findall(r'class="lesson"', HTML)) >= 8  # a lesson link beside each control
