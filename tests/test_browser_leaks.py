"""Nothing a user or the model wrote makes the browser fetch anything, on every page that shows it: the Memory page
(a memory is the user's own sentence), the Search page (snippets and titles) and the chat (questions, answers)."""

import pytest

from tests.test_browser import CHROMIUM, ask, browser  # noqa: F401 (browser: the fixture)
from tests.test_browser_chat import answered, app_url, hits, new_page  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")


def test_a_memory_and_a_search_result_with_an_image_fetch_nothing(app_url, browser, hits):  # noqa: F811
    page = new_page(browser)
    ask(page, app_url, "I prefer bar charts for sales figures. Which chart fits a quarterly report?")
    answered(page)
    page.goto(f"{app_url}/memory")
    page.get_by_text("I prefer bar charts for sales figures.").first.wait_for(timeout=300_000)
    # The attacker's move: a memory edited to an image (the model's extractor could write one too).
    page.get_by_role("button", name="Edit").first.click()
    box = page.get_by_label("Memory")
    box.wait_for(timeout=300_000)
    box.fill(f"I prefer ![chart]({hits.url}/memory) charts")
    page.get_by_role("button", name="Save").click()
    page.get_by_role("link", name="chart").first.wait_for(timeout=300_000)  # shown as a link, not an image
    page.goto(f"{app_url}/search?q=bar+charts+sales")
    page.get_by_text("sales figures").first.wait_for(timeout=300_000)
    page.wait_for_timeout(1000)  # time for any image request to arrive
    assert hits.paths == []
    page.evaluate(f"fetch('{hits.url}/control').then(r => r.text())")  # the counter sees a real fetch
    page.wait_for_timeout(500)
    assert hits.paths == ["/control"]
