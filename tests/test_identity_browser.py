"""A real Chromium, through a proxy that appends its identity headers instead of replacing the client's (the
misconfiguration): Streamlit 1.67 keeps both copies of a header from the WebSocket upgrade
(st.context.headers.get_all), and the app refuses the request instead of believing the client's copy."""

from __future__ import annotations

import pytest

from tests.app_process import CHROMIUM, launch, start_app
from tests.header_proxy import HeaderProxy

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")

PROXY_HEADERS = b"X-Forwarded-Email: alice@example.com\r\nX-Proxy-Secret: s3cret\r\n"


@pytest.fixture(scope="module")
def proxied_app(tmp_path_factory):
    app = start_app(
        tmp_path_factory.mktemp("identity"),
        {"CHAT_IDENTITY": "header", "CHAT_PROXY_SECRET": "s3cret", "CHAT_DEMO_DELAY": "0"},
    )
    proxy = HeaderProxy(app.port, PROXY_HEADERS, replace=False)  # done wrong: the client's headers stay
    yield proxy
    proxy.close()
    app.stop()


@pytest.fixture
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch(playwright)
        yield browser
        browser.close()


def test_through_the_proxy_alone_the_user_is_the_proxys(proxied_app, browser):
    page = browser.new_context().new_page()
    page.goto(f"http://127.0.0.1:{proxied_app.port}")
    page.locator("[data-testid='stChatInput'] textarea").wait_for(timeout=300_000)
    page.locator("[data-testid='stSidebar']").get_by_text("alice@example.com").wait_for(timeout=300_000)


def test_a_client_that_sends_its_own_identity_header_is_refused_not_believed(proxied_app, browser):
    context = browser.new_context(extra_http_headers={"X-Forwarded-Email": "bob@example.com"})
    page = context.new_page()
    page.goto(f"http://127.0.0.1:{proxied_app.port}")
    page.get_by_text("X-Forwarded-Email more than once").wait_for(timeout=300_000)
    assert page.locator("[data-testid='stChatInput']").count() == 0
    assert page.get_by_text("bob@example.com").count() == 0 and page.get_by_text("alice@example.com").count() == 0
