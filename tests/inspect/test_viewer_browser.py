"""The viewer page in real headless Chromium: it renders, reacts to the selectors and to
hover, shows hostile tokens as text, and logs no console errors.

Needs Debian's chromium + chromium-driver (``bash .ci/install-browser.sh``, run by ``make test``
where it can); skipped with one summary line when either is absent (a failure instead when
ATTNKIT_REQUIRE_BROWSER is set, as .ci/run does). Selenium Manager is never used (the driver path is
given), so nothing is downloaded. Set ATTNKIT_VIEWER_SCREENSHOT=/path.png to keep a
screenshot of the full page.
"""

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from _browser import start_chromium  # skips this module when Chromium or its driver is absent (fails on CI)
from selenium.common.exceptions import NoAlertPresentException  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

from attnkit.inspect.metrics import classify_heads  # noqa: E402
from attnkit.inspect.viewer import save_html  # noqa: E402

EVIL = "<script>alert(1)</script>"
TOKENS = ["[CLS]", "the", EVIL, "sat", '<img src=x onerror="window.__pwned=1">', "mat", "[SEP]"]
L = len(TOKENS)


def make_layers():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(1, 3, L, L, generator=g).mul(2.5).softmax(-1) for _ in range(2)]


LAYERS = make_layers()


def drawn(layer: int, head: int) -> dict:
    """{(i, j): weight} the page should draw for one head: rounded to 4 decimals, >= 0.001."""
    w = np.rint(LAYERS[layer][0, head].double().numpy() * 1e4) / 1e4
    return {(i, j): w[i, j] for i in range(L) for j in range(L) if w[i, j] >= 0.001}


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    d = start_chromium(tmp_path_factory.mktemp("chromium-profile"), window="1400,1100", page_load_timeout=30)
    yield d
    d.quit()


def open_page(driver, path: Path) -> None:
    driver.get(path.resolve().as_uri())
    WebDriverWait(driver, 10).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ak-ready") == "1")


def into_view(driver, element):
    """Scroll ``element`` to the middle of the viewport (pointer actions do not scroll)."""
    driver.execute_script("arguments[0].scrollIntoView({block: 'center', inline: 'center'})", element)
    return element


def severe(driver) -> list:
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def lines(driver) -> dict:
    """{(h, i, j): opacity} of the drawn lines, plus their strokes."""
    rows = driver.execute_script(
        "return Array.from(document.querySelectorAll('#ak-lines line')).map(l => ["
        "+l.getAttribute('data-h'), +l.getAttribute('data-i'), +l.getAttribute('data-j'),"
        "+l.getAttribute('stroke-opacity'), l.getAttribute('stroke'), l.getAttribute('class')])"
    )
    return {(h, i, j): (op, stroke, cls) for h, i, j, op, stroke, cls in rows}


@pytest.fixture(scope="module")
def page(driver, tmp_path_factory):
    path = tmp_path_factory.mktemp("viewer") / "head_view.html"
    save_html(path, LAYERS, TOKENS, title=f"viewer test {EVIL}", diagnostics=classify_heads(LAYERS))
    open_page(driver, path)
    return path


def test_renders_tokens_and_lines_without_errors(driver, page):
    assert len(driver.find_elements(By.CSS_SELECTOR, "#ak-left .ak-tok.ak-q")) == L
    assert len(driver.find_elements(By.CSS_SELECTOR, "#ak-right .ak-tok.ak-k")) == L
    got = lines(driver)
    want = drawn(0, 0)
    assert {(i, j) for _, i, j in got} == set(want)
    for (h, i, j), (op, _, _) in got.items():
        assert h == 0 and op == pytest.approx(want[i, j], abs=1e-9)
    assert driver.find_element(By.ID, "ak-matrix").size["width"] > 100
    assert severe(driver) == []


def test_head_and_layer_selectors_redraw_lines(driver, page):
    before = lines(driver)
    Select(driver.find_element(By.ID, "ak-head")).select_by_value("1")
    after = lines(driver)
    assert after != before
    want = drawn(0, 1)
    assert {(i, j) for _, i, j in after} == set(want)
    assert all(h == 1 and op == pytest.approx(want[i, j], abs=1e-9) for (h, i, j), (op, _, _) in after.items())

    Select(driver.find_element(By.ID, "ak-head")).select_by_value("all")
    overlay = lines(driver)
    assert len(overlay) == sum(len(drawn(0, h)) for h in range(3))
    assert len({stroke for _, stroke, _ in overlay.values()}) == 3  # one colour per head

    Select(driver.find_element(By.ID, "ak-layer")).select_by_value("1")
    Select(driver.find_element(By.ID, "ak-head")).select_by_value("2")
    want = drawn(1, 2)
    got = lines(driver)
    assert {(i, j) for _, i, j in got} == set(want)
    assert all(op == pytest.approx(want[i, j], abs=1e-9) for (_, i, j), (op, _, _) in got.items())
    Select(driver.find_element(By.ID, "ak-layer")).select_by_value("0")
    Select(driver.find_element(By.ID, "ak-head")).select_by_value("0")
    assert severe(driver) == []


def test_hover_highlights_a_tokens_lines(driver, page):
    svg = driver.find_element(By.ID, "ak-lines")
    assert "ak-focus" not in svg.get_attribute("class")
    query = driver.find_elements(By.CSS_SELECTOR, "#ak-left .ak-tok")[3]
    ActionChains(driver).move_to_element(into_view(driver, query)).perform()
    assert "ak-focus" in svg.get_attribute("class")
    assert "ak-active" in query.get_attribute("class")
    got = lines(driver)
    lit = {k for k, (_, _, cls) in got.items() if "ak-hl" in cls}
    assert lit and lit == {k for k in got if k[1] == 3}  # exactly the outgoing lines of query 3
    # Keys are tinted by the weight query 3 gives them.
    keys = driver.find_elements(By.CSS_SELECTOR, "#ak-right .ak-tok")
    tints = [k.value_of_css_property("background-color") for k in keys]
    assert sum(t != "rgba(0, 0, 0, 0)" for t in tints) >= 2

    key = driver.find_elements(By.CSS_SELECTOR, "#ak-right .ak-tok")[1]
    ActionChains(driver).move_to_element(into_view(driver, key)).perform()
    got = lines(driver)
    lit = {k for k, (_, _, cls) in got.items() if "ak-hl" in cls}
    assert lit and lit == {k for k in got if k[2] == 1}  # exactly the incoming lines of key 1

    ActionChains(driver).move_to_element(into_view(driver, driver.find_element(By.ID, "ak-title"))).perform()
    assert "ak-focus" not in svg.get_attribute("class")
    assert not any("ak-hl" in cls for _, _, cls in lines(driver).values())
    assert severe(driver) == []


def test_hostile_tokens_stay_text(driver, page):
    for column in ("#ak-left", "#ak-right"):
        tok = driver.find_elements(By.CSS_SELECTOR, f"{column} .ak-tok")[2]
        assert tok.get_attribute("textContent") == EVIL
        assert tok.find_elements(By.XPATH, "./*") == []  # no element was created from it
    img_tok = driver.find_elements(By.CSS_SELECTOR, "#ak-left .ak-tok")[4]
    assert img_tok.get_attribute("textContent") == TOKENS[4]
    assert driver.execute_script("return document.querySelectorAll('script').length") == 3
    assert driver.execute_script("return document.querySelectorAll('img').length") == 0
    assert driver.execute_script("return window.__pwned === undefined")
    assert driver.title == f"viewer test {EVIL}"
    assert driver.find_element(By.ID, "ak-title").get_attribute("textContent") == f"viewer test {EVIL}"
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert.text  # noqa: B018 -- raises when no alert is open
    assert severe(driver) == []


def test_diagnostics_row_selects_head(driver, page):
    rows = driver.find_elements(By.CSS_SELECTOR, "#ak-diag tbody tr")
    assert len(rows) == 6
    cells = rows[4].find_elements(By.TAG_NAME, "td")
    assert [c.text for c in cells[:2]] == ["1", "1"]
    into_view(driver, rows[4]).click()
    assert Select(driver.find_element(By.ID, "ak-layer")).first_selected_option.get_attribute("value") == "1"
    assert Select(driver.find_element(By.ID, "ak-head")).first_selected_option.get_attribute("value") == "1"
    assert "ak-selected" in rows[4].get_attribute("class")
    assert {(i, j) for _, i, j in lines(driver)} == set(drawn(1, 1))
    assert severe(driver) == []


def test_patch_and_series_views(driver, tmp_path):
    g = torch.Generator().manual_seed(1)
    n = 1 + 3 * 4  # [CLS] + 3x4 patches
    layers = [torch.randn(1, 2, n, n, generator=g).mul(2).softmax(-1)]
    image = np.random.default_rng(0).random((30, 40, 3))
    series = np.sin(np.arange(n) / 2.0)
    path = save_html(tmp_path / "patch.html", layers, ["CLS"] + [f"p{k}" for k in range(12)],
                     patch_grid=(3, 4), num_prefix_tokens=1, image=image, series=series)
    open_page(driver, path)
    assert driver.find_element(By.ID, "ak-patch-view").is_displayed()
    canvas = into_view(driver, driver.find_element(By.ID, "ak-patch"))
    w, h = canvas.size["width"], canvas.size["height"]
    assert w > 100 and h * 4 == w * 3
    cs = w / 4
    # Click the patch at row 2, column 1 (offsets are from the canvas centre): query 1 + 2*4 + 1.
    dx, dy = int(1.5 * cs - w / 2), int(2.5 * cs - h / 2)
    ActionChains(driver).move_to_element_with_offset(canvas, dx, dy).click().perform()
    assert Select(driver.find_element(By.ID, "ak-patch-query")).first_selected_option.get_attribute("value") == "10"
    assert "query 10" in driver.find_element(By.ID, "ak-patch-info").text

    assert driver.find_element(By.ID, "ak-series-view").is_displayed()
    shades = lambda: driver.find_elements(By.CSS_SELECTOR, "#ak-series rect.ak-shade")  # noqa: E731
    nonzero = lambda i: int((np.rint(layers[0][0, 0, i].numpy() * 1e4) > 0).sum())  # noqa: E731
    assert len(shades()) == nonzero(n - 1)  # last step selected first
    driver.find_element(By.ID, "ak-step").send_keys(Keys.HOME)
    assert "step 0" in driver.find_element(By.ID, "ak-step-label").text
    assert len(shades()) == nonzero(0)
    opacities = [float(r.get_attribute("fill-opacity")) for r in shades()]
    assert max(opacities) == pytest.approx(0.85, abs=1e-3)  # the row max gets the darkest shade
    assert driver.find_element(By.CSS_SELECTOR, "#ak-series path.ak-series-line").get_attribute("d").startswith("M")
    assert severe(driver) == []

    shot = os.environ.get("ATTNKIT_VIEWER_SCREENSHOT")
    target = Path(shot) if shot else tmp_path / "viewer.png"
    driver.set_window_size(1400, 1500)
    driver.save_screenshot(str(target))
    assert target.read_bytes().startswith(b"\x89PNG")
