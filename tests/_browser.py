"""Headless Chromium for the tests that open real pages (the viewer, the report).

Needs Debian's chromium + chromium-driver (``bash .ci/install-browser.sh``, which ``make test``
runs where it can). Importing this module skips the calling test module when either binary is
absent — a failure instead when ATTNKIT_REQUIRE_BROWSER is set, as .ci/run does. Selenium Manager is
never used (the driver path is given), so nothing is downloaded.
"""

from __future__ import annotations

import os
from pathlib import Path

from _browser_gate import CHROMEDRIVER, CHROMIUM, require_browser

require_browser(bool(os.environ.get("ATTNKIT_REQUIRE_BROWSER")))  # CI sets it: there a missing browser fails

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402

FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def start_chromium(profile_dir: Path, *, window: str, page_load_timeout: float) -> webdriver.Chrome:
    """A headless Chromium with its own profile folder, browser console logs kept, window ``"W,H"``."""
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for flag in [*FLAGS, f"--window-size={window}", f"--user-data-dir={profile_dir}"]:
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=opts)
    d.set_page_load_timeout(page_load_timeout)
    return d
