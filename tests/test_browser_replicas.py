"""Two `streamlit run` replicas on one table and one Redis serve one user in two browsers: the answer one
replica writes is shown live by the other, and Stop on the other stops it."""

import os
import subprocess
import sys

import pytest

from tests.redis_server import REDIS_SERVER, redis_server  # noqa: F401 (the fixture)
from tests.test_browser import ARTIFACTS, CHROMIUM, HANG_MS, ROOT, send, serve_app
from tests.test_browser_chat import browser  # noqa: F401 (the fixture: one Chromium per test)

pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)"),
    pytest.mark.skipif(REDIS_SERVER is None, reason="Debian's redis-server is not installed"),
]

USER = "ada@example.com"
MESSAGES = "[data-testid='stChatMessage']"


@pytest.fixture
def dynamo(tmp_path):
    """The embedded DynamoDB in a process of its own, shared by both replicas."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHAT_", "ANTHROPIC_"))}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.shared_dynamo", str(tmp_path / "db"), "shared-chat"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = process.stdout.readline().strip()
        assert url.startswith("http://"), "the shared DynamoDB did not start"
        yield url
    finally:
        process.kill()
        process.wait(timeout=HANG_MS / 1000)


@pytest.fixture
def replicas(tmp_path, dynamo, redis_server):
    settings = dict(
        CHAT_BACKEND="aws",
        CHAT_DYNAMODB_ENDPOINT=dynamo,
        CHAT_TABLE="shared-chat",
        CHAT_IDENTITY="header",
        CHAT_TRUST_NETWORK="1",
        CHAT_CURSOR_SECRET="replica-secret",
        CHAT_REDIS_URL=redis_server.url,
        CHAT_DEMO_DELAY="0.1",
        CHAT_MODEL_PROVIDER="demo",
        AWS_ACCESS_KEY_ID="local",
        AWS_SECRET_ACCESS_KEY="local",
    )
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with serve_app(tmp_path / "a", **settings) as first, serve_app(tmp_path / "b", **settings) as second:
        yield first, second


def signed_in(browser, **viewport):
    """A browser whose requests carry the SSO proxy's header (CHAT_IDENTITY=header)."""
    context = browser.new_context(
        extra_http_headers={"X-Forwarded-Email": USER}, viewport=viewport or {"width": 1280, "height": 900}
    )
    return context.new_page()


def test_the_other_replica_shows_the_answer_live_and_can_stop_it(replicas, browser):
    first_url, second_url = replicas
    laptop = signed_in(browser)
    laptop.goto(first_url)
    box = laptop.locator("[data-testid='stChatInput'] textarea")
    box.wait_for(timeout=HANG_MS)
    box.fill("Tell me about DynamoDB keys")
    send(box)
    laptop.get_by_text("You asked").first.wait_for(timeout=HANG_MS)
    session = laptop.url.split("session=")[1].split("&")[0]

    phone = signed_in(browser, width=390, height=844)
    phone.goto(f"{second_url}/?session={session}")  # the other replica: the answer is only in Redis
    phone.get_by_role("button", name="Stop").wait_for(timeout=HANG_MS)
    answer = phone.locator(MESSAGES).nth(1)
    answer.get_by_text("You asked").wait_for(timeout=HANG_MS)
    phone.screenshot(path=str(ARTIFACTS / "replica-live.png"))
    phone.get_by_role("button", name="Stop").click()  # stops the worker on the first replica
    phone.get_by_text("Stopped before the answer was complete.").wait_for(timeout=HANG_MS)
    laptop.get_by_text("Stopped before the answer was complete.").wait_for(timeout=HANG_MS)
    assert phone.get_by_role("button", name="Retry").count() == 1
    phone.get_by_role("button", name="Retry").click()  # answered by the second replica this time
    phone.get_by_text("out tokens").first.wait_for(timeout=HANG_MS)
    laptop.get_by_text("out tokens").first.wait_for(timeout=HANG_MS)  # the first learns it through Redis
