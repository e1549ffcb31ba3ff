"""A headless Chromium for the browser tests (Debian's chromium + chromedriver, via selenium).

Skips the test with a clear message when no browser is installed (`./run setup` installs one as
root where apt is available). Screenshots go to tests/.artifacts/."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMEDRIVER = "/usr/bin/chromedriver"
ARTIFACTS = Path(__file__).resolve().parent / ".artifacts"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]  # fmt: skip


def browser_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@contextlib.contextmanager
def headless_chromium(window: str = "1100,1000") -> Iterator:
    """A selenium Chrome driver on a fresh profile, quit (profile removed) at the end."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (pip install 'selenium>=4.20,<5', part of the dev extra)")
    binary = browser_binary()
    if binary is None or not Path(CHROMEDRIVER).is_file():
        pytest.skip("no headless browser: install Debian's chromium and chromium-driver "
                    "(apt-get install -y chromium chromium-driver; ./run setup does it as root)")  # fmt: skip
    profile = tempfile.mkdtemp(prefix="odqa-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in [*FLAGS, f"--window-size={window}", f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
