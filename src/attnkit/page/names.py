"""A run's name as a reader should see it: ``dates-list-full`` is a folder name, "date lists (long
run)" is what it is. Every place of the page that names a committed run calls :func:`run_name`,
so no section shows an internal id as if it were words (the seq2seq section once opened with eight
of them).

A name is read part by part: its data set (:data:`DATASETS`, the longest prefix that matches), then
its qualifiers (:data:`QUALIFIERS`, e.g. ``-30``, ``-in336``), then its length (``-full``,
``-quick``). A name with an unknown part keeps that part as written, in ``<code>`` where HTML is
asked for, so a new run is still shown, and the folder name stays beside it for whoever looks for
the files.
"""

from __future__ import annotations

from html import escape

DATASETS = {
    "dates-list": ("date lists", "日期列表"),
    "dates": ("single dates", "单个日期"),
    "bible-hash": ("Bible En→Es, hash split", "圣经英译西，哈希划分"),
    "bible": ("Bible En→Es, split by book", "圣经英译西，按卷划分"),
    "copy": ("copy a string", "复制字符串"),
    "reverse": ("reverse a string", "反转字符串"),
    "translit": ("transliterate names", "音译人名"),
    "etth1": ("ETTh1 oil temperature", "ETTh1 油温"),
    "vic_elec": ("Victoria electricity demand", "维多利亚州用电需求"),
}
QUALIFIERS = {
    "30": ("trained on ≤ 30 words", "训练句不超过 30 词"),
    "in336": ("336-step input", "输入 336 步"),
}
LENGTHS = {"full": ("long run", "长时间运行"), "quick": ("quick run", "快速运行")}


def _parts(name: str) -> tuple[tuple[str, str] | None, list[tuple[str, str]], tuple[str, str] | None]:
    """(data set words, qualifier words, length words) of ``name``; None where that part is absent."""
    key = next((k for k in sorted(DATASETS, key=len, reverse=True) if name == k or name.startswith(k + "-")), None)
    rest = name[len(key):] if key else name
    bits = [b for b in rest.split("-") if b]
    length = LENGTHS.get(bits[-1]) if bits else None
    if length is not None:
        bits = bits[:-1]
    return (DATASETS[key] if key else None), [QUALIFIERS.get(b, (b, b)) for b in bits], length


def run_name(name: str, lang: str = "en", *, html: bool = False) -> str:
    """``name`` (a committed run's folder, e.g. ``bible-hash-30``) in words, in ``lang``; with ``html``,
    escaped and followed by the folder name in ``<code>`` (for the reader who opens the files)."""
    zh = lang == "zh"
    data, quals, length = _parts(name)
    words = "，".join(q[1] for q in quals) if zh else ", ".join(q[0] for q in quals)
    if data is not None:
        words = data[zh] + (("，" if zh else ", ") + words if words else "")
    if length is not None:  # "full" alone (the vision run) is just its length
        words = (words + (f"（{length[1]}）" if zh else f" ({length[0]})")) if words else length[zh]
    if not html:
        return words
    return f"{escape(words)} <code class='run'>{escape(name)}</code>"
