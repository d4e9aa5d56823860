"""Screenshots of a report page at its top, middle and end, taken with headless Chromium.

``test_browser.py`` takes them of the tiny report into a temporary folder and checks they are not
blank; the committed ones under ``docs/screenshots/`` (linked from the README) are written by

    python tests/report/_screenshots.py report-en/index.html report-zh/index.html docs/screenshots

from pages of ``attnkit report`` (``--lang en`` and ``--lang zh``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

WINDOW = "1200,900"
PLACES = ("top", "middle", "end")


def take(driver, page: Path, out_dir: Path, prefix: str) -> list[Path]:
    """``out_dir/{prefix}_{top,middle,end}.png`` of ``page``, each one window tall."""
    out_dir.mkdir(parents=True, exist_ok=True)
    driver.get(Path(page).resolve().as_uri())
    height = driver.execute_script("return document.documentElement.scrollHeight")
    window = driver.execute_script("return window.innerHeight")
    shots = []
    for place, y in zip(PLACES, (0, max(0, (height - window) // 2), max(0, height - window))):
        driver.execute_script(f"window.scrollTo(0, {y})")
        time.sleep(0.3)  # let lazy images and frames draw
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
        time.sleep(0.3)
        path = out_dir / f"{prefix}_{name}.png"
        driver.save_screenshot(str(path))
        shots.append(path)
    return shots


def spread(path: Path) -> float:
    """The standard deviation of a screenshot's grey levels (0 for a blank, one-colour picture)."""
    from PIL import Image, ImageStat

    with Image.open(path) as im:
        return ImageStat.Stat(im.convert("L")).stddev[0]


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the browser helper
    from _browser import start_chromium

    en, zh, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3] if len(sys.argv) > 3 else "docs/screenshots")
    # "section=css selector" arguments after the folder: one screenshot more per target, e.g. kv_cache=#kv_cache
    targets = dict(a.split("=", 1) for a in sys.argv[4:])
    import tempfile

    with tempfile.TemporaryDirectory() as profile:
        driver = start_chromium(Path(profile), window=WINDOW, page_load_timeout=120)
        try:
            for lang, page in (("en", en), ("zh", zh)):
                for p in take(driver, page, out, f"report_{lang}") + take_at(driver, page, out, f"report_{lang}", targets):
                    print(p, f"grey-level spread {spread(p):.1f}")
        finally:
            driver.quit()
