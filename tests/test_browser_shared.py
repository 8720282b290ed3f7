"""The shared page in a real browser: nothing the owner or the model wrote makes the viewer's browser fetch anything
(tests/test_browser_leaks.py's rule, on the page a colleague opens by link)."""

import pytest

from tests.test_browser import CHROMIUM, HANG_MS, ask, browser  # noqa: F401 (browser: the fixture)
from tests.test_browser_chat import answered, app_url, hits, new_page  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")


def test_a_shared_chat_with_images_in_its_turns_fetches_nothing(app_url, browser, hits):  # noqa: F811
    page = new_page(browser)
    ask(page, app_url, f"Look at ![chart]({hits.url}/question) and <img src='{hits.url}/html'> please")
    answered(page)
    page.get_by_role("button", name="Share").click()
    page.get_by_role("button", name="Create link").click()
    code = page.locator("[data-testid='stCode']").filter(has_text="/shared?t=")
    code.first.wait_for(timeout=HANG_MS)
    url = code.first.inner_text().strip()
    assert url.startswith(app_url) and "/shared?t=" in url
    page.goto(url)
    page.get_by_text("read-only").first.wait_for(timeout=HANG_MS)
    page.get_by_role("link", name="chart").first.wait_for(timeout=HANG_MS)  # shown as a link, not an image
    page.wait_for_timeout(1000)  # time for any image request to arrive
    assert hits.paths == []
    page.evaluate(f"fetch('{hits.url}/control').then(r => r.text())")  # the counter sees a real fetch
    page.wait_for_timeout(500)
    assert hits.paths == ["/control"]
