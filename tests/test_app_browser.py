"""The dashboard in a real browser: `streamlit run app.py` headless on a localhost port, opened in headless
Chromium through selenium and chromedriver.

Needs Debian's `chromium` and `chromium-driver` (`apt-get install -y chromium chromium-driver`) and selenium;
without them the test is skipped, saying which is missing and how to install it. The screenshots (the default
page, and every page in turn) are saved under pytest's tmp_path and copied to $ROOFLINE_ARTIFACTS when that is
set (for CI to keep, and for a person to look at: a clipped label or a covered marker fails no assertion).
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from roofline import analyze
from roofline.views.fmt import fmt_seconds

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
CHROMIUM_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1600,1300")
START_TIMEOUT_S, PAGE_TIMEOUT_S = 60, 120
PAGES = ("Roofline", "Latency–throughput", "Memory", "Per-op table", "Regime map", "Derivation", "Compare",
         "Validation", "Plan")


def require_browser() -> None:
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not Path(path).is_file()]
    if missing:
        pytest.skip(f"chromium/chromedriver not installed ({', '.join(missing)} missing): "
                    "apt-get install chromium chromium-driver")
    pytest.importorskip("selenium", reason="selenium not installed: pip install selenium")
    pytest.importorskip("streamlit", reason="streamlit not installed: pip install -e '.[app]'")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def app_url(tmp_path):
    """`streamlit run app.py` on a free localhost port; stopped (by its own pid) after the test."""
    require_browser()
    port = free_port()
    log_path = tmp_path / "streamlit.log"
    command = [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.headless=true",
               f"--server.port={port}", "--server.address=127.0.0.1", "--browser.gatherUsageStats=false",
               "--server.fileWatcherType=none"]
    with open(log_path, "w") as log:
        server = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                try:
                    urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).close()
                    break
                except OSError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        pytest.fail(f"streamlit did not start:\n{log_path.read_text()}")
                    time.sleep(0.3)
            yield url
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()


def metric_value(driver, label: str) -> str | None:
    from selenium.webdriver.common.by import By

    for block in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMetric"]'):
        if block.find_element(By.CSS_SELECTOR, '[data-testid="stMetricLabel"]').text.strip() == label:
            return block.find_element(By.CSS_SELECTOR, '[data-testid="stMetricValue"]').text.strip()
    return None


def figure_loaded(driver) -> bool:
    from selenium.webdriver.common.by import By

    images = driver.find_elements(By.CSS_SELECTOR, '[data-testid="stImage"] img, [data-testid="stFullScreenFrame"] img')
    return any(driver.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", i) for i in images)


@pytest.fixture
def browser(app_url, tmp_path):
    """Headless Chromium on the app, closed after the test."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.get(app_url)
        yield driver
    finally:
        driver.quit()


def waiting(driver):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, PAGE_TIMEOUT_S, poll_frequency=0.5, ignored_exceptions=(StaleElementReferenceException,))


def idle(driver) -> bool:
    """The script has finished its run: no 'Running…' status, and nothing drawn stale (faded) from the run before."""
    from selenium.webdriver.common.by import By

    running = driver.find_elements(By.CSS_SELECTOR,
                                   '[data-testid="stStatusWidget"] img, [data-testid="stStatusWidgetRunningIcon"]')
    stale = driver.execute_script('return [...document.querySelectorAll(\'[data-stale="true"]\')].length')
    return not running and not stale


def keep(screenshot: Path) -> None:
    if os.environ.get("ROOFLINE_ARTIFACTS"):
        artifacts = Path(os.environ["ROOFLINE_ARTIFACTS"])
        artifacts.mkdir(parents=True, exist_ok=True)
        shutil.copy(screenshot, artifacts / screenshot.name)


def test_the_browser_shows_the_default_models_tpot(browser, tmp_path):
    from selenium.webdriver.common.by import By

    waiting(browser).until(lambda d: metric_value(d, "TPOT") is not None and figure_loaded(d))
    screenshot = tmp_path / "app_screenshot.png"
    browser.save_screenshot(str(screenshot))
    keep(screenshot)
    expected = fmt_seconds(analyze("llama-2-13b", "h100-sxm", batch=[1], prompt=1024, gen=128).metrics["tpot_s"].iloc[0])
    assert metric_value(browser, "TPOT") == expected
    assert not browser.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')
    assert screenshot.stat().st_size > 10_000  # a rendered page, not a blank one


def test_every_page_renders_in_the_browser_and_is_kept_as_a_screenshot(browser, tmp_path):
    """Each page clicked as a person would, its whole length captured (the main pane scrolls, so the window
    is made as tall as the page), no exception and no error on any."""
    from selenium.webdriver.common.by import By

    waiting(browser).until(lambda d: metric_value(d, "TPOT") is not None and figure_loaded(d))
    for number, page in enumerate(PAGES):
        option = browser.find_element(By.XPATH, f'//div[@data-testid="stRadio"]//label[.//p[text()="{page}"]]')
        option.click()
        picked = f'//label[.//p[text()="{page}"]]//input'
        waiting(browser).until(lambda d, picked=picked: idle(d) and d.find_element(By.XPATH, picked).is_selected())
        time.sleep(1.0)  # images and vega charts decode after the run ends
        waiting(browser).until(idle)
        height = browser.execute_script(
            'const m = document.querySelector(\'[data-testid="stMain"]\') || document.body;'
            'return Math.max(m.scrollHeight, document.body.scrollHeight)')
        browser.set_window_size(1600, min(max(int(height) + 200, 1300), 6000))
        time.sleep(0.5)
        screenshot = tmp_path / f"page-{number}-{page.split()[0].split('–')[0].lower()}.png"
        browser.save_screenshot(str(screenshot))
        keep(screenshot)
        browser.set_window_size(1600, 1300)
        assert not browser.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]'), page
        errors = [e.text for e in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stAlertContentError"]')]
        assert not errors, (page, errors)
        assert screenshot.stat().st_size > 10_000, page


def test_a_hybrid_models_memory_page_and_a_malformed_upload_in_the_browser(browser, tmp_path):
    """The cache-against-context figure (a hybrid model's Memory page; its byte labels were clipped) and an
    upload nested 200,000 deep (a RecursionError traceback once), each kept as a screenshot."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    waiting(browser).until(lambda d: metric_value(d, "TPOT") is not None and figure_loaded(d))
    model = browser.find_element(By.XPATH, '//div[@data-testid="stSelectbox"][.//p[text()="Model"]]//input')
    model.click()
    model.send_keys("nemotron-nano-9b-v2", Keys.ENTER)
    waiting(browser).until(lambda d: idle(d) and "nemotron-nano-9b-v2 (K=8)" in d.find_element(
        By.CSS_SELECTOR, '[data-testid="stMain"]').text)  # the headline names the model analysed
    browser.find_element(By.XPATH, '//div[@data-testid="stRadio"]//label[.//p[text()="Memory"]]').click()
    waiting(browser).until(lambda d: idle(d) and len(d.find_elements(By.CSS_SELECTOR, '[data-testid="stImage"] img')) >= 2)
    time.sleep(1.0)
    browser.set_window_size(1600, 2600)
    time.sleep(0.5)
    screenshot = tmp_path / "page-memory-hybrid.png"
    browser.save_screenshot(str(screenshot))
    keep(screenshot)
    browser.set_window_size(1600, 1300)
    assert not browser.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')

    nested = tmp_path / "nested-config.json"
    nested.write_bytes(b"[" * 200_000)
    browser.find_element(By.CSS_SELECTOR, '[data-testid="stSidebar"] input[type="file"]').send_keys(str(nested))
    waiting(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, '[data-testid="stAlertContentError"]') and idle(d))
    screenshot = tmp_path / "upload-nested.png"
    browser.save_screenshot(str(screenshot))
    keep(screenshot)
    [error] = [e.text for e in browser.find_elements(By.CSS_SELECTOR, '[data-testid="stAlertContentError"]')]
    assert "nested-config.json" in error and "nested more than 64 levels" in error and "Fix:" in error
    assert not browser.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')
