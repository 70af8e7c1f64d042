"""The dashboard in a real browser: `streamlit run app.py` headless on a localhost port, opened in headless
Chromium through selenium and chromedriver.

Needs Debian's `chromium` and `chromium-driver` (`apt-get install -y chromium chromium-driver`) and selenium;
without them the test is skipped, saying which is missing and how to install it. The screenshot is saved
under pytest's tmp_path and copied to $ROOFLINE_ARTIFACTS when that is set (for CI to keep).
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


def test_the_browser_shows_the_default_models_tpot(app_url, tmp_path):
    from selenium import webdriver
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.get(app_url)
        wait = WebDriverWait(driver, PAGE_TIMEOUT_S, poll_frequency=0.5, ignored_exceptions=(StaleElementReferenceException,))
        wait.until(lambda d: metric_value(d, "TPOT") is not None and figure_loaded(d))
        screenshot = tmp_path / "app.png"
        driver.save_screenshot(str(screenshot))
        if os.environ.get("ROOFLINE_ARTIFACTS"):
            artifacts = Path(os.environ["ROOFLINE_ARTIFACTS"])
            artifacts.mkdir(parents=True, exist_ok=True)
            shutil.copy(screenshot, artifacts / "app_screenshot.png")
        expected = fmt_seconds(analyze("llama-2-13b", "h100-sxm", batch=[1], prompt=1024, gen=128).metrics["tpot_s"].iloc[0])
        assert metric_value(driver, "TPOT") == expected
        assert not driver.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')
        assert screenshot.stat().st_size > 10_000  # a rendered page, not a blank one
    finally:
        driver.quit()
