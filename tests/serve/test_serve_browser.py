"""The real page of the real server in headless Chromium: type, run, toggle every mask, switch
language, step the decoder — no console error, no request off this machine, no horizontal
overflow at a phone's width.

Needs Debian's chromium + chromium-driver (``bash .ci/install-browser.sh``); skipped with one summary
line when either is absent (a failure when ATTNKIT_REQUIRE_BROWSER is set, as on CI). Set
ATTNKIT_SERVE_SCREENSHOTS=docs/screenshots to write the README's screenshots
(serve_{zh,en}_{laptop,phone}.png).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _browser import start_chromium  # skips this module when Chromium or its driver is absent (fails on CI)
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

WIDTHS = {"laptop": 1366, "phone": 390}


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    d = start_chromium(tmp_path_factory.mktemp("chromium-profile"), window="1366,900", page_load_timeout=30)
    yield d
    d.quit()


@pytest.fixture(scope="module")
def origin(server):
    host, port = server
    return f"http://{host}:{port}"


def body_attr(driver, name: str) -> str | None:
    return driver.find_element(By.TAG_NAME, "body").get_attribute(name)


def open_page(driver, url: str) -> None:
    driver.get(url)
    WebDriverWait(driver, 60).until(lambda d: body_attr(d, "data-ready") == "1")


def wait_count(driver, attr: str, before: int, timeout: float = 60) -> None:
    WebDriverWait(driver, timeout).until(lambda d: int(body_attr(d, attr) or 0) > before)


def count(driver, attr: str) -> int:
    return int(body_attr(driver, attr) or 0)


def severe(driver) -> list:
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def off_machine(driver, origin: str) -> list[str]:
    """URLs the page requested from anywhere but this server."""
    urls = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name).concat([location.href])")
    return [u for u in urls if not u.startswith(origin + "/")]


def focus_pixel(driver, i: int, j: int) -> list[int]:
    """RGBA a quarter into cell (query i, key j) of the enlarged head (the hatch crosses its centre)."""
    return driver.execute_script(
        "const [i, j] = arguments; const lay = focusLayout(S.attn.n_tokens);"
        "const x = lay.margin + (j + 0.25) * lay.cell, y = lay.margin + (i + 0.25) * lay.cell;"
        "return Array.from(document.getElementById('focus').getContext('2d').getImageData(x, y, 1, 1).data);", i, j)


GREY = [0xE3, 0xE6, 0xEC, 255]  # the colour of a masked-out cell


def run_mask(driver, value: str) -> dict:
    before = count(driver, "data-attn-count")
    driver.find_element(By.CSS_SELECTOR, f"input[name=mask][value={value}]").click()
    wait_count(driver, "data-attn-count", before)
    return driver.execute_script("return {L: S.attn.n_tokens, removed: S.attn.removed, tokens: S.attn.tokens, rows: "
                                 "S.attn.weights[0][0].map(r => r.reduce((a, b) => a + b, 0))}")


def test_type_run_and_every_mask(driver, origin):
    open_page(driver, origin + "/")
    assert driver.execute_script("return document.documentElement.lang") == "zh-CN"
    assert driver.find_element(By.ID, "lang").text == "English"
    box = driver.find_element(By.ID, "text")
    box.clear()
    box.send_keys("The cat sat on the mat.")
    before = count(driver, "data-attn-count")
    driver.find_element(By.ID, "run").click()
    wait_count(driver, "data-attn-count", before)
    L = 9  # [CLS] the cat sat on the mat . [SEP]
    assert driver.execute_script("return S.attn.tokens.length") == L
    assert len(driver.find_elements(By.CSS_SELECTOR, "#grid canvas")) == 72
    assert "9" in driver.find_element(By.ID, "status").text

    r = run_mask(driver, "causal")
    assert r["removed"] == L * (L - 1) // 2
    assert focus_pixel(driver, 0, L - 1) == GREY and focus_pixel(driver, L - 1, 0) != GREY
    run_mask(driver, "window")
    win = driver.find_element(By.ID, "window")
    win.clear()
    before = count(driver, "data-attn-count")
    win.send_keys("2", Keys.TAB)  # leaving the box changes the width: the page asks again
    wait_count(driver, "data-attn-count", before)
    assert driver.execute_script("return S.attn.window") == 2
    assert focus_pixel(driver, 5, 3) == GREY and focus_pixel(driver, 5, 4) != GREY
    r = run_mask(driver, "padding")
    assert r["L"] == L + 4 and r["tokens"][-1] == "[PAD]"
    assert r["rows"][-1] == 0 and abs(r["rows"][0] - 1) < 1e-5  # a padded query's row is all zeros
    assert focus_pixel(driver, L + 1, 0) == GREY
    assert "[PAD]" in driver.find_element(By.ID, "mask-note").text
    r = run_mask(driver, "none")
    assert r["removed"] == 0 and focus_pixel(driver, 0, L - 1) != GREY
    assert severe(driver) == []
    assert off_machine(driver, origin) == []


def test_a_long_input_draws_from_row_summaries(driver, origin):
    open_page(driver, origin + "/?lang=en")
    box = driver.find_element(By.ID, "text")
    driver.execute_script("arguments[0].value = Array(300).fill('word').join(' ')", box)  # 302 tokens, no typing wait
    before = count(driver, "data-attn-count")
    driver.find_element(By.ID, "run").click()
    wait_count(driver, "data-attn-count", before)
    assert driver.execute_script("return S.attn.weights") is None
    assert "302 tokens" in driver.find_element(By.ID, "long-note").text
    before = count(driver, "data-attn-count")
    driver.find_element(By.CSS_SELECTOR, "#grid canvas[data-layer='3'][data-head='4']").click()  # asks for that head's rows
    wait_count(driver, "data-attn-count", before)
    assert driver.execute_script("return [S.attn.focus.layer, S.attn.focus.head]") == [3, 4]
    top = driver.execute_script("return S.attn.focus.topk_indices[10]")
    assert focus_pixel(driver, 10, top[0]) != [255, 255, 255, 255]  # row 10's strongest key is drawn
    drawn = driver.execute_script(  # cells of row 10 that are not white, read in one pass
        "const lay = focusLayout(S.attn.n_tokens), ctx = document.getElementById('focus').getContext('2d');"
        "const y = lay.margin + 10.25 * lay.cell, d = ctx.getImageData(lay.margin, y, lay.cell * S.attn.n_tokens, 1).data;"
        "let n = 0; for (let j = 0; j < S.attn.n_tokens; j++) { if (d[4 * j * lay.cell] < 255) n++; } return n;")
    assert 1 <= drawn <= len(top)  # only the row's top k keys are drawn
    assert severe(driver) == []


def test_language_switch_and_lesson_links(driver, origin):
    open_page(driver, origin + "/")
    driver.find_element(By.ID, "lang").click()
    assert driver.execute_script("return document.documentElement.lang") == "en"
    assert driver.find_element(By.ID, "run").text == "Compute attention"
    assert "lang=en" in driver.current_url
    links = [a.get_attribute("href") for a in driver.find_elements(By.CSS_SELECTOR, "a.lesson")]
    assert links and all(h.startswith(origin + "/lessons/en/") for h in links)
    driver.find_element(By.ID, "lang").click()
    assert driver.find_element(By.ID, "run").text == "计算注意力"
    open_page(driver, origin + "/?lang=en")
    assert driver.find_element(By.ID, "lang").text == "中文"
    assert severe(driver) == []


def test_step_the_decoder(driver, origin):
    open_page(driver, origin + "/?lang=en")
    before = count(driver, "data-decode-count")
    driver.find_element(By.ID, "decode").click()
    wait_count(driver, "data-decode-count", before, timeout=90)
    for _ in range(3):
        driver.find_element(By.ID, "step-next").click()
    assert driver.find_element(By.ID, "step-label").text == "step 4 / 40"
    P = len("And God said, ")
    assert f"keeps {P + 3} of {P + 3} positions" in driver.find_element(By.ID, "cache-now").text

    Select(driver.find_element(By.ID, "cache-kind")).select_by_value("sliding")
    assert driver.find_element(By.ID, "cache-args").get_attribute("value") == '{"window":16}'
    before = count(driver, "data-decode-count")
    driver.find_element(By.ID, "decode").click()
    wait_count(driver, "data-decode-count", before)
    for _ in range(9):
        driver.find_element(By.ID, "step-next").click()
    assert f"keeps 16 of {P + 9} positions" in driver.find_element(By.ID, "cache-now").text
    assert len(driver.find_elements(By.CSS_SELECTOR, "#decoded .evicted")) == P + 9 - 16
    assert severe(driver) == []
    assert off_machine(driver, origin) == []


@pytest.mark.parametrize("lang", ["zh", "en"])
@pytest.mark.parametrize("width", list(WIDTHS))
def test_fits_the_width_and_screenshot(driver, origin, lang, width):
    driver.set_window_size(WIDTHS[width], 900)
    open_page(driver, origin + ("/?lang=en" if lang == "en" else "/"))
    Select(driver.find_element(By.ID, "cache-kind")).select_by_value("sliding")  # a cache that evicts
    before = count(driver, "data-decode-count")
    driver.find_element(By.ID, "decode").click()
    wait_count(driver, "data-decode-count", before, timeout=90)
    out = os.environ.get("ATTNKIT_SERVE_SCREENSHOTS")
    for _ in range(24 if out else 2):  # a screenshot shows the ring after it has started evicting
        driver.find_element(By.ID, "step-next").click()
    overflow = driver.execute_script("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, f"the page scrolls sideways by {overflow}px at {WIDTHS[width]}px"
    if out:
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(WIDTHS[width], height + 140)  # the window's chrome takes some of the height
        driver.execute_script("window.scrollTo(0, 0)")
        Path(out).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(out) / f"serve_{lang}_{width}.png"))
    assert severe(driver) == []
    driver.set_window_size(1366, 900)
