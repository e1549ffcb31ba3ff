"""The search page at / in a real headless browser (Debian's chromium + chromedriver, via selenium).

Types a question, submits, waits for the results and checks the rendered titles, highlights,
index version and the line saying what the scores mean (the hybrid's 0.000 and negative ones); the screenshot is saved under tests/.artifacts/ (path printed). Skips with a clear
message when no browser is installed (`./run setup` installs one as root where apt is available).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from odqa.service.app import create_app
from tests.browser import ARTIFACTS, headless_chromium
from tests.serve.harness import ServiceThread


@pytest.fixture
def browser():
    with headless_chromium() as driver:
        yield driver


def test_the_search_page_shows_highlighted_results_and_the_index_version(browser, served_workspace: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    from odqa.storage import Workspace
    from odqa.storage.releases import current_release

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
        note = browser.find_element(By.ID, "score-note").text
        notes = {kind: browser.execute_script("return scoreNote(arguments[0], 1.1)", kind)
                 for kind in ("bm25", "dense", "hybrid")}  # fmt: skip
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
    assert note == notes["dense"] and "inner product" in note  # the default retriever's scores, explained
    assert "BM25" in notes["bm25"]
    assert "dense + 1.1 \u00d7 BM25" in notes["hybrid"] and "0.000 is mid-range" in notes["hybrid"]
    assert escaped == '&lt;b&gt;<mark class="q">Curie</mark>&lt;/b&gt; &amp; co'
    assert shot.stat().st_size > 10_000
