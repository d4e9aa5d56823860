"""A saved viewer page (:mod:`attnkit.inspect.viewer`) again, with its words in another language.

The report shows a run's interactive viewers on its English and its Chinese page. The weights a
viewer stores are the same in both, so the Chinese viewer is not drawn from the model again: the
page's data element is taken over as it is and put into the page skeleton of the other language
(:func:`attnkit.inspect.viewer._page`), whose words come from :mod:`attnkit.inspect.viewer_text`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from attnkit.inspect.viewer import _json_for_script, _page

__all__ = ["language_copy", "relang_html", "save_in_language"]

_DATA = re.compile(r'<script type="application/json" id="ak-data">(.*?)</script>', re.S)


def relang_html(page: str, lang: str, title: str | None = None) -> str:
    """A viewer ``page`` written by :func:`render_html` (of any version and language), again with its words in
    ``lang`` and the same weights; ``title`` replaces its title when given (e.g. a translated one).

    The weights are taken over as stored, so a saved run's viewer is put in another language without the
    model that made it."""
    found = _DATA.search(page)
    if found is None:
        raise ValueError("page is not an attnkit viewer (no <script id=\"ak-data\"> element); pass a page render_html wrote")
    data_json = found.group(1)
    data = json.loads(data_json)
    if title is not None:
        if not isinstance(title, str):
            raise TypeError(f"title must be a str or None; got {type(title).__name__}")
        data["title"] = title
        data_json = _json_for_script(data)
    return _page(data_json, data["title"], lang)


def save_in_language(src: str | Path, dest: str | Path, lang: str, title: str | None = None) -> Path:
    """Write the viewer page ``src`` to ``dest`` with its words in ``lang`` (:func:`relang_html`); returns ``dest``.
    ``dest`` may be ``src`` itself."""
    page = relang_html(Path(src).read_text(encoding="utf-8"), lang, title)
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(page, encoding="utf-8")
    return dest


def language_copy(src: str | Path, dest_dir: str | Path, lang: str, title: str | None = None) -> Path:
    """The viewer ``src`` written into ``dest_dir`` with its words in ``lang``: as ``<name>.html`` in English and
    ``<name>.<lang>.html`` otherwise, so that the pages of two languages sharing a folder (or a run's own
    folder) never overwrite each other's viewer, nor the run's original. Returns the written path."""
    src, dest_dir = Path(src), Path(dest_dir)
    name = src.name if lang == "en" else f"{src.stem}.{lang}{src.suffix}"
    if lang == "en" and (dest_dir / name).resolve() == src.resolve():
        return src  # the run's own English viewer, already where the page links it
    return save_in_language(src, dest_dir / name, lang, title)
