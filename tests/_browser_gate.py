"""Whether the browser tests can run here: both Chromium and its driver, or one clear outcome.

Missing either binary skips the browser test modules with one reason that names what is missing
and the command that installs it (``make test`` prints it once, in its summary); with
``ATTNKIT_REQUIRE_BROWSER`` set (CI) the same gap is a failure instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
INSTALL = "sudo bash .ci/install-browser.sh"


def missing(chromium: Path = CHROMIUM, driver: Path = CHROMEDRIVER) -> list[str]:
    """The browser binaries that are not installed, as paths."""
    return [str(p) for p in (chromium, driver) if not p.exists()]


def require_browser(required: bool, chromium: Path = CHROMIUM, driver: Path = CHROMEDRIVER) -> None:
    """Return when both binaries exist; otherwise fail (``required``) or skip the calling module."""
    gone = missing(chromium, driver)
    if not gone:
        return
    what = " and ".join(gone)
    if required:
        pytest.fail(f"ATTNKIT_REQUIRE_BROWSER is set but {what} not installed; install it with: {INSTALL}", pytrace=False)
    pytest.skip(f"browser tests skipped: {what} not installed; enable with: {INSTALL}", allow_module_level=True)
