"""Small pieces for self-contained HTML: escaping, tables, an inline-SVG heatmap, the page shell.

No external assets: the report must open offline, so pictures are inline SVG or base64 PNG.
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path
from typing import Iterable, Sequence


def esc(x: object) -> str:
    return html.escape(str(x), quote=True)


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def svg_heatmap(
    values: Sequence[Sequence[float]],
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    *,
    cell: int = 16,
    title: str = "",
) -> str:
    """A (rows, cols) grid of values in [0, 1] as inline SVG, darker = larger."""
    n_rows = len(values)
    n_cols = len(values[0]) if n_rows else 0
    pad_l = 8 + 7 * max((len(s) for s in row_labels or []), default=0)
    pad_t = 8 + 7 * max((len(s) for s in col_labels or []), default=0)
    w, h = pad_l + n_cols * cell + 4, pad_t + n_rows * cell + 4
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" aria-label="{esc(title)}">']
    for i, row in enumerate(values):
        for j, val in enumerate(row):
            a = max(0.0, min(1.0, float(val)))
            parts.append(
                f'<rect x="{pad_l + j * cell}" y="{pad_t + i * cell}" width="{cell}" height="{cell}" '
                f'fill="rgb(31,119,180)" fill-opacity="{a:.3f}" stroke="#eee"><title>{i},{j}: {float(val):.3f}</title></rect>'
            )
    for i, lab in enumerate(row_labels or []):
        parts.append(f'<text x="{pad_l - 4}" y="{pad_t + i * cell + cell * 0.75}" font-size="11" text-anchor="end">{esc(lab)}</text>')
    for j, lab in enumerate(col_labels or []):
        x, y = pad_l + j * cell + cell * 0.7, pad_t - 4
        parts.append(f'<text x="{x}" y="{y}" font-size="11" transform="rotate(-90 {x} {y})">{esc(lab)}</text>')
    parts.append("</svg>")
    return "".join(parts)


PAGE_PX = 1000  # the page's text column: a wider figure is scaled down to it
MIN_SHOWN_PX = 200  # a figure shown less tall than this at the page's width is a strip whose labels cannot be read
MAX_PX = 3000  # wider than 3x the column, 11-pt labels drawn at 100 dpi shrink under 4 px


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) in pixels from a PNG's IHDR chunk (bytes 16-24: two big-endian 32-bit integers)."""
    if data[:8] != b"\x89PNG\r\n\x1a\n" or len(data) < 24:
        raise ValueError(f"expected a PNG file (it starts with \\x89PNG), got {data[:8]!r}; save figures as PNG")
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def check_readable(width: int, height: int, name: str = "figure") -> None:
    """Refuse a figure a reader cannot read at the page's width: shown (scaled to :data:`PAGE_PX`)
    less than :data:`MIN_SHOWN_PX` tall, or wider than :data:`MAX_PX` (its labels shrink to specks).
    Why a guard and not a note: a 2,146 x 397 strip of alignment maps shrank to 185 px, its tick
    labels to 2 px, and nobody saw it until a learner did."""
    shown = height * min(1.0, PAGE_PX / width)
    if shown < MIN_SHOWN_PX or width > MAX_PX:
        raise ValueError(f"{name}: a {width} x {height} px figure is shown {shown:.0f} px tall at the page's {PAGE_PX} px width "
                         f"(expected at least {MIN_SHOWN_PX} px tall and at most {MAX_PX} px wide); draw it in rows "
                         f"(wrap the panels) or taller, not as one wide strip")


def png_img(path: str | Path, alt: str = "", *, figure_lang: str | None = None, teach: bool = False) -> str:
    """The PNG at ``path`` inlined as base64 (the page stays one self-contained file), refused when
    too wide to read (:func:`check_readable`); ``figure_lang`` marks which language its text is in
    (``data-figure-lang``, for tests and readers); ``teach`` marks a figure that carries the section's
    argument, which :func:`details` keeps visible whatever fold it is written in."""
    raw = Path(path).read_bytes()
    check_readable(*png_size(raw), name=Path(path).name)
    data = base64.b64encode(raw).decode("ascii")
    mark = (f' data-figure-lang="{esc(figure_lang)}"' if figure_lang else "") + (' data-teach="1"' if teach else "")
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{data}" style="max-width:100%"{mark}>'


def figure(path: str | Path, alt: str, lang: str, *, teach: bool = False) -> str:
    """The figure at ``path`` in the page's language: on the Chinese page its ``zh/`` copy (see
    :func:`attnkit.page.figures.zh_path`) when one was drawn, else the English figure and a visible
    note saying why (no CJK font on the machine that drew it, or a figure of a run drawn in English)."""
    from .figures import cjk_font, zh_path

    path = Path(path)
    if lang != "zh":
        return png_img(path, alt, figure_lang="en", teach=teach)
    zh = zh_path(path)
    if zh.is_file():
        return png_img(zh, alt, figure_lang="zh", teach=teach)
    why = ("未找到覆盖中文的字体（Debian 软件包 fonts-noto-cjk，make report 会安装），因此此图保留英文标注。" if cjk_font() is None
           else "此图由一次以英文绘图的运行生成（例如已提交的长时间运行），因此保留英文标注。")
    return png_img(path, alt, figure_lang="en", teach=teach) + f'<p class="note figure-en">{esc(why)}</p>'


_TAUGHT = re.compile(r'<img [^>]*data-teach="1"[^>]*>(?:<p class="note figure-en">.*?</p>)?', re.S)
_ALT = re.compile(r'<img alt="([^"]*)"')


def details(summary: str, body: str) -> str:
    """``body`` folded under a clickable ``summary`` line (closed by default); ``summary`` is HTML.

    The figures of ``body`` marked ``teach`` (:func:`figure`) are lifted out of the fold and shown
    after it, each with its alt text as a visible caption: a fold holds the raw tables and the
    diagnostics, never the figure that carries the argument (a learner found 60 of 79 figures folded)."""
    if not body:
        return ""
    taught = _TAUGHT.findall(body)
    rest = _TAUGHT.sub("", body)
    fold = f"<details><summary>{summary}</summary>{rest}</details>" if re.sub(r"<[^>]+>|\s", "", rest) or "<img" in rest else ""
    shown = "".join(f'<figure class="taught">{t}<figcaption>{_ALT.search(t).group(1)}</figcaption></figure>' for t in taught)
    return fold + shown


def so_what(lang: str, text: str) -> str:
    """The plain reading of a section (two or three sentences, HTML), in a box after its evidence."""
    word = "这说明什么" if lang == "zh" else "So what"
    return f'<div class="sowhat"><b>{word}:</b> {text}</div>'


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.6em} h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
/* a table whose cells hold unbreakable strings (a model's degenerate output) scrolls inside its own box, not the page */
table{border-collapse:collapse;margin:1em 0;font-size:.9em;max-width:100%;display:block;overflow-x:auto} td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top;overflow-wrap:break-word}
th{background:#f4f4f4} code,pre{background:#f6f6f6;padding:.1em .3em} pre{padding:.8em;overflow:auto}
.note{color:#555;font-size:.9em} .fail{color:#b00} .ok{color:#070} nav a{margin-right:1em;display:inline-block}
.q{background:#eef5fb;border-left:4px solid #1f77b4;padding:.4em .8em;margin:.6em 0}
.read{background:#f7f7f2;border-left:4px solid #999;padding:.4em .8em;margin:.6em 0}
.notice{background:#fff6e0;border-left:4px solid #e0a000;padding:.4em .8em}
dl.cols dt{font-weight:600;display:inline} dl.cols dd{display:inline;margin:0 1em 0 .3em}
.sowhat{background:#eef8ee;border-left:4px solid #2a8a2a;padding:.4em .8em;margin:.8em 0}
.deeper{border-left:4px solid #7a4fb0;padding:.3em .8em;margin:.8em 0}
details{margin:.8em 0;padding:.3em .8em;border:1px solid #ddd;border-radius:4px}
summary{cursor:pointer;font-weight:600;color:#1f4f7a} details[open]>summary{margin-bottom:.5em}
td:first-child{min-width:7em}
a.term{color:inherit;text-decoration:none} abbr[title]{text-decoration:underline dotted;cursor:help}
figure.taught{margin:1em 0} figcaption{color:#555;font-size:.9em;margin-top:.2em}
dl.glossary dt{font-weight:600;margin-top:.6em} dl.glossary dd{margin:0 0 0 1.5em}
"""


def page(title: str, sections: Sequence[tuple[str, str]], *, intro: str = "", lang: str = "en",
         ids: Sequence[str] | None = None, failed: Sequence[bool] | None = None, contents: str = "") -> str:
    """The whole document: a title, a table of contents, and each (heading, html body) section.

    ``ids`` names each ``<section>`` (``data-section``, the anchors); ``failed`` marks sections whose
    body is an error (``data-failed="1"``), so a test or a reader can find them.
    """
    ids = list(ids) if ids is not None else [f"s{i}" for i in range(len(sections))]
    failed = list(failed) if failed is not None else [False] * len(sections)
    nav = "".join(f'<a href="#{esc(i)}">{esc(h)}</a>' for i, (h, _) in zip(ids, sections))
    body = "".join(
        f'<section id="{esc(i)}" data-section="{esc(i)}" data-failed="{int(bad)}"><h2>{esc(h)}</h2>{b}</section>'
        for i, bad, (h, b) in zip(ids, failed, sections)
    )
    return (
        f"<!doctype html><html lang=\"{esc(lang)}\"><head><meta charset=\"utf-8\">"
        f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{esc(title)}</title>"
        f"<style>{_CSS}</style></head><body><h1>{esc(title)}</h1>{intro}"
        f"<nav aria-label=\"{esc(contents or 'contents')}\">{nav}</nav>{body}</body></html>"
    )
