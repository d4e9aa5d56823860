"""Screenshots of the report's English and Chinese pages — top, middle, end, and each section named —
taken at full page width with headless Chromium (Debian's chromium + chromium-driver; fonts-noto-cjk
for the Chinese page: ``bash .ci/install-browser.sh``).

``test_browser.py`` takes them of the tiny report into a temporary folder and checks they are not
blank. To look at a real report, build it (the quick default, reusing the committed ``results/``) and
shoot both pages, one command from the repository root::

    python tests/report/_screenshots.py --build /tmp/report --out /tmp/shots --section seq2seq vision kv_cache

``--build DIR`` writes ``DIR/index.en.html`` and ``DIR/index.zh.html`` with ``attnkit report --lang en|zh``
(sections are cached in ``DIR/.cache``, so a second build is quick; ``--runs R`` reads finished experiment runs
under ``R`` instead of running them, as ``attnkit report --runs`` does); without it, pass two pages built
before: ``--en PAGE --zh PAGE``. A section is named by its id (``#vision``) or as ``name=CSS selector``.
The files are ``OUT/report_{en,zh}_{top,middle,end,<section>}.png``; the committed ones under
``docs/screenshots/`` (linked from the README) are the top, middle and end of the quick report.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

WINDOW = "1200,900"
PLACES = ("top", "middle", "end")


_DRAWN = ("return Array.from(document.images).filter(i => { const r = i.getBoundingClientRect(); "
          "return r.bottom > 0 && r.top < window.innerHeight; }).every(i => i.complete);")


def _settle(driver, limit_s: float = 5.0) -> None:
    """Wait until the images in the window have loaded (they load lazily), at most ``limit_s``."""
    end = time.monotonic() + limit_s
    time.sleep(0.3)
    while not driver.execute_script(_DRAWN) and time.monotonic() < end:
        time.sleep(0.2)


def take(driver, page: Path, out_dir: Path, prefix: str) -> list[Path]:
    """``out_dir/{prefix}_{top,middle,end}.png`` of ``page``, each one window tall."""
    out_dir.mkdir(parents=True, exist_ok=True)
    driver.get(Path(page).resolve().as_uri())
    height = driver.execute_script("return document.documentElement.scrollHeight")
    window = driver.execute_script("return window.innerHeight")
    shots = []
    for place, y in zip(PLACES, (0, max(0, (height - window) // 2), max(0, height - window))):
        driver.execute_script(f"window.scrollTo(0, {y})")
        _settle(driver)  # let lazy images and frames draw
        path = out_dir / f"{prefix}_{place}.png"
        driver.save_screenshot(str(path))
        shots.append(path)
    return shots


def take_at(driver, page: Path, out_dir: Path, prefix: str, targets: dict[str, str]) -> list[Path]:
    """``out_dir/{prefix}_{name}.png`` for each ``name: CSS selector`` of ``targets``: the window scrolled so
    that the first element matching the selector is at its top (a section, a figure, a glossary)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    driver.get(Path(page).resolve().as_uri())
    shots = []
    for name, selector in targets.items():
        found = driver.execute_script("const e = document.querySelector(arguments[0]); if (!e) return false; "
                                      "e.scrollIntoView(); window.scrollBy(0, -10); return true;", selector)
        if not found:
            continue
        _settle(driver)
        path = out_dir / f"{prefix}_{name}.png"
        driver.save_screenshot(str(path))
        shots.append(path)
    return shots


def spread(path: Path) -> float:
    """The standard deviation of a screenshot's grey levels (0 for a blank, one-colour picture)."""
    from PIL import Image, ImageStat

    with Image.open(path) as im:
        return ImageStat.Stat(im.convert("L")).stddev[0]


def build(out: Path, runs: Path | None = None) -> tuple[Path, Path]:
    """``attnkit report`` at its quick default into ``out``, in English then in Chinese (the second reuses the
    first's cached sections), reading experiment results under ``runs`` when given; returns (English page, Chinese page)."""
    import shutil
    import subprocess

    pages = []
    for lang in ("en", "zh"):
        where = ["--runs", str(runs)] if runs is not None else []
        subprocess.run([sys.executable, "-m", "attnkit.cli", "report", "--out", str(out), "--lang", lang, *where], check=True)
        pages.append(out / f"index.{lang}.html")
        shutil.copyfile(out / "index.html", pages[-1])
    return pages[0], pages[1]


def _arguments(argv: list[str] | None):
    import argparse

    p = argparse.ArgumentParser(prog="python tests/report/_screenshots.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("docs/screenshots"), help="folder of the PNGs (default docs/screenshots)")
    p.add_argument("--build", type=Path, metavar="DIR", help="build the quick report into DIR first, in both languages")
    p.add_argument("--runs", type=Path, metavar="DIR", help="with --build: read experiment results under DIR (attnkit report --runs)")
    p.add_argument("--en", type=Path, metavar="PAGE", help="the English page (without --build)")
    p.add_argument("--zh", type=Path, metavar="PAGE", help="the Chinese page (without --build)")
    p.add_argument("--section", nargs="*", default=[], metavar="ID",
                   help="one screenshot more per section: its id (vision) or name=CSS selector")
    p.add_argument("--width", type=int, default=1280, help="window width in CSS pixels (default 1280)")
    p.add_argument("--height", type=int, default=900, help="window height in CSS pixels (default 900)")
    args = p.parse_args(argv)
    if args.build is None and (args.en is None or args.zh is None):
        p.error("pass --build DIR, or both --en PAGE and --zh PAGE")
    return args


def main(argv: list[str] | None = None) -> list[Path]:
    """Build (``--build``) or take the two pages, and write the screenshots; returns their paths."""
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the browser helper
    from _browser import start_chromium

    args = _arguments(argv)
    en, zh = build(args.build, args.runs) if args.build is not None else (args.en, args.zh)
    targets = dict(t.split("=", 1) if "=" in t else (t, f"#{t}") for t in args.section)
    shots = []
    with tempfile.TemporaryDirectory() as profile:
        driver = start_chromium(Path(profile), window=f"{args.width},{args.height}", page_load_timeout=300)
        try:
            for lang, page in (("en", en), ("zh", zh)):
                for p in take(driver, page, args.out, f"report_{lang}") + take_at(driver, page, args.out, f"report_{lang}", targets):
                    print(p, f"grey-level spread {spread(p):.1f}")
                    shots.append(p)
        finally:
            driver.quit()
    return shots


if __name__ == "__main__":
    main()
