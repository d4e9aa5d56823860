"""The browser gate: Chromium without its driver skips the browser tests with one line that names
the driver and the install command (not 9 errors), and fails them when ATTNKIT_REQUIRE_BROWSER is set."""

from __future__ import annotations

import pytest

from _browser_gate import INSTALL, missing, require_browser


def _paths(tmp_path, *present):
    for name in present:
        (tmp_path / name).touch()
    return tmp_path / "chromium", tmp_path / "chromedriver"


def test_both_present_runs(tmp_path):
    chromium, driver = _paths(tmp_path, "chromium", "chromedriver")
    assert missing(chromium, driver) == []
    require_browser(True, chromium, driver)  # neither skips nor fails


@pytest.mark.parametrize("present", [("chromium",), ("chromedriver",), ()])
def test_a_missing_binary_skips_with_the_command_that_installs_it(tmp_path, present):
    chromium, driver = _paths(tmp_path, *present)
    with pytest.raises(pytest.skip.Exception) as skipped:
        require_browser(False, chromium, driver)
    reason = str(skipped.value)
    for path in missing(chromium, driver):
        assert path in reason
    assert "chromedriver" in reason or "chromium" in reason
    assert f"enable with: {INSTALL}" in reason and reason.count("\n") == 0


@pytest.mark.parametrize("present", [("chromium",), ("chromedriver",), ()])
def test_a_missing_binary_fails_when_the_browser_is_required(tmp_path, present):
    chromium, driver = _paths(tmp_path, *present)
    with pytest.raises(pytest.fail.Exception, match="ATTNKIT_REQUIRE_BROWSER is set but .* not installed"):
        require_browser(True, chromium, driver)
