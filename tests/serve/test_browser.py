"""The search page at / in a real headless browser (Debian's chromium + chromedriver, via selenium).

Types a question, submits, waits for the results and checks the rendered titles, highlights and
index version; the screenshot is saved under tests/.artifacts/ (path printed). Skips with a clear
message when no browser is installed (`./run setup` installs one as root where apt is available).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from service.app import create_app
from tests.serve.harness import REPO, ServiceThread

CHROMEDRIVER = "/usr/bin/chromedriver"
ARTIFACTS = REPO / "tests" / ".artifacts"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1100,1000"]  # fmt: skip


def _browser_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (pip install 'selenium>=4.20,<5', part of the dev extra)")
    binary = _browser_binary()
    if binary is None or not Path(CHROMEDRIVER).is_file():
        pytest.skip("no headless browser: install Debian's chromium and chromium-driver "
                    "(apt-get install -y chromium chromium-driver; ./run setup does it as root)")  # fmt: skip
    profile = tempfile.mkdtemp(prefix="odqa-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in [*FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def test_the_search_page_shows_highlighted_results_and_the_index_version(browser, served_workspace: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    from storage import Workspace
    from storage.releases import current_release

    version = current_release(Workspace.resolve(served_workspace)).release
    with ServiceThread(create_app(served_workspace)) as service:
        browser.get(f"{service.url}/")
        wait = WebDriverWait(browser, 60)
        wait.until(ec.text_to_be_present_in_element((By.ID, "version-id"), version))
        browser.find_element(By.ID, "question").send_keys("Where was Marie Curie born?")
        browser.find_element(By.ID, "answer").send_keys("Warsaw")
        browser.find_element(By.ID, "submit").click()
        wait.until(ec.presence_of_all_elements_located((By.CSS_SELECTOR, "#results li.hit")))
        hits = browser.find_elements(By.CSS_SELECTOR, "#results li.hit")
        titles = [h.find_element(By.CLASS_NAME, "title").text for h in hits]
        answers = [m.text for m in browser.find_elements(By.CSS_SELECTOR, "mark.a")]
        terms = {m.text.lower() for m in browser.find_elements(By.CSS_SELECTOR, "mark.q")}
        status = browser.find_element(By.ID, "status").text
        # passage text is escaped, never interpreted: markup in it shows as text
        escaped = browser.execute_script("return highlight('<b>Curie</b> & co', ['curie'], '')")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / "serve-search-page.png"
        assert browser.save_screenshot(str(shot))
        print(f"\nscreenshot: {shot}")
    assert len(hits) == 5 and titles[0] == "Marie Curie"
    assert answers and set(answers) == {"Warsaw"}
    assert {"marie", "curie", "born"} <= terms
    assert version in status and "5 passages" in status
    assert escaped == '&lt;b&gt;<mark class="q">Curie</mark>&lt;/b&gt; &amp; co'
    assert shot.stat().st_size > 10_000
