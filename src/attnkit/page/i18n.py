"""The page's two languages: every piece of prose is written as an (English, Chinese) pair.

Numbers are formatted once and put into both sentences, so ``--lang zh`` shows the same run's
numbers as ``--lang en``; only the words change.
"""

from __future__ import annotations

LANGS = ("en", "zh")

# the fixed labels of the page shell, per language
LABELS = {
    "en": {"question": "Question", "read": "How to read it", "says": "What the numbers say now",
           "failed": "This section failed", "contents": "Contents", "cached": "reused from the cache",
           "title": "attnkit report: attention, measured", "notice": "Notice",
           "deeper": "Go deeper", "lesson_run": "a script you can run, or open as a notebook with jupytext"},
    "zh": {"question": "本节回答的问题", "read": "如何读图", "says": "本次运行的数字说明了什么",
           "failed": "本节运行失败", "contents": "目录", "cached": "来自缓存",
           "title": "attnkit 报告：注意力机制，实测", "notice": "提示",
           "deeper": "深入学习", "lesson_run": "可直接运行的脚本，也可用 jupytext 作为笔记本打开"},
}


def check_lang(lang: object) -> str:
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {', '.join(LANGS)}, got {lang!r}; use --lang en or --lang zh")
    return lang  # type: ignore[return-value]


def tr(lang: str, en: str, zh: str) -> str:
    """The sentence in the page's language (``en`` or ``zh``)."""
    return zh if lang == "zh" else en


def label(lang: str, key: str) -> str:
    return LABELS[check_lang(lang)][key]
