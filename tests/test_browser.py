"""End to end: `streamlit run app.py` and a real headless Chromium (Debian's), driven by Playwright."""

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

# shared with the browser test modules, which import them from here
from tests.app_process import CHROMIUM, CHROMIUM_ARGS, HANG_MS, HANG_S, launch  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_app(tmp_path, **settings: str):
    """`streamlit run app.py` on a free port with these CHAT_*/ANTHROPIC_* settings; yields its URL.

    Fails fast with the log's tail if the server exits or never listens."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHAT_", "ANTHROPIC_"))}
    env.update(CHAT_DATA_DIR=str(tmp_path / "data"), CHAT_DEMO_DELAY="0.03")
    env.update(settings)
    log_path = tmp_path / "streamlit.log"
    log = log_path.open("w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            "app.py",
            "--server.port",
            str(port),
            "--server.address",
            "127.0.0.1",
            "--server.headless",
            "true",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + HANG_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                tail = log_path.read_text()[-2000:]
                assert process.poll() is None, f"streamlit exited:\n{tail}"
                assert time.monotonic() < deadline, f"streamlit never listened:\n{tail}"
                time.sleep(0.3)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=HANG_S)
        log.close()


@pytest.fixture
def app_url(tmp_path, request):
    """The app on a free port; `request.param`, if given, is the demo model's delay between chunks."""
    with serve_app(tmp_path, CHAT_DEMO_DELAY=str(getattr(request, "param", 0.03))) as url:
        yield url


@pytest.fixture
def browser():
    """Debian's Chromium, headless, for one test (the browser test modules share this fixture)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch(playwright)
        ARTIFACTS.mkdir(exist_ok=True)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    return browser.new_context(viewport={"width": 1280, "height": 900}).new_page()


def idle(page):
    """The app's run has ended (Streamlit's 'running' widget is gone) and lazy elements have loaded: what is drawn
    is this run's, none of it faded."""
    page.wait_for_function(
        "!document.querySelector(\"[data-testid='stStatusWidget']\") && "
        "!document.querySelector(\"[data-testid='stSkeleton']\")",
        timeout=HANG_MS,
    )


def send(box) -> None:
    """Press Enter in the chat input once Streamlit would take it: its Send button is enabled (text or files in,
    nothing still uploading, the app connected and its widgets not disabled). Enter pressed before that is ignored
    by Streamlit, leaving the text unsent in the box, so a test that pressed it earlier waited for an answer that
    was never asked for; a person sees the button and waits for it too."""
    box.page.locator("[data-testid='stChatInputSubmitButton']:enabled").wait_for(timeout=HANG_MS)
    box.press("Enter")


def attach(page, files: list[dict]) -> None:
    """Attach files in the composer and wait until their upload has finished. Streamlit's chat input ignores
    Enter while a file is still uploading (its Send button is disabled until then), so a question sent before
    that would not be sent at all: the test waits as a person watching the button would."""
    page.locator("[data-testid='stChatInput'] input[type='file']").set_input_files(files)
    page.locator("[data-testid='stChatInputSubmitButton']:enabled").wait_for(timeout=HANG_MS)


def prepared(script: str) -> list[str]:
    """Run a preparation script in its own process (it writes a data folder the app then serves, and prints ids)."""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=HANG_S)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


def ask(page, app_url, question):
    """Open the app and send a question through the chat input, as a person would."""
    page.goto(app_url)
    page.locator("[data-testid='stChatInput'] textarea").wait_for(timeout=HANG_MS)
    type_question(page, question)


def type_question(page, question):
    """Type a question into the chat input of the page as it is and press Enter; returns the input."""
    box = page.locator("[data-testid='stChatInput'] textarea")
    box.fill(question)
    send(box)
    return box


def test_ask_see_the_streamed_answer_reload_and_find_the_session(app_url, page):
    ask(page, app_url, "How should I design a DynamoDB table for chat history?")
    answer = page.locator("[data-testid='stChatMessage']").filter(has_text="Data modelling")
    answer.first.wait_for(timeout=HANG_MS)
    page.get_by_text("out tokens").first.wait_for(timeout=HANG_MS)  # the turn finished and was saved
    page.screenshot(path=str(ARTIFACTS / "chat-after-first-answer.png"))
    assert "session=" in page.url

    page.reload()
    sidebar = page.locator("[data-testid='stSidebar']")
    sidebar.get_by_role("button", name="How should I design a DynamoDB").wait_for(timeout=HANG_MS)
    page.locator("[data-testid='stChatMessage']").filter(has_text="Start from the queries").first.wait_for(
        timeout=HANG_MS
    )
    page.screenshot(path=str(ARTIFACTS / "chat-after-reload.png"))

    page.goto(app_url)  # a fresh visit without the deep link: the session is in the sidebar; open it
    sidebar.get_by_role("button", name="How should I design a DynamoDB").click()
    page.locator("[data-testid='stChatMessage']").filter(has_text="Start from the queries").first.wait_for(
        timeout=HANG_MS
    )


MESSAGES = "[data-testid='stChatMessage']"


def chat_row(page, title):
    return page.locator("[data-testid='stSidebar']").get_by_role("button", name=title)


# A slow answer (about 10 s), so every action lands mid-answer even on a loaded machine.
@pytest.mark.parametrize("app_url", [0.1], indirect=True)
def test_leaving_mid_answer_and_coming_back_finds_it_still_coming_then_saved(app_url, page):
    ask(page, app_url, "Tell me about DynamoDB keys")
    page.get_by_text("You asked").first.wait_for(timeout=HANG_MS)  # the answer has started
    page.locator("[data-testid='stSidebar']").get_by_role("button", name="New chat").click()
    page.get_by_text("What can I help with?").wait_for(timeout=HANG_MS)
    chat_row(page, "Tell me about DynamoDB keys").click()
    page.get_by_role("button", name="Stop").wait_for(timeout=HANG_MS)  # still being written, shown live
    page.screenshot(path=str(ARTIFACTS / "chat-streaming.png"))
    page.get_by_text("out tokens").first.wait_for(timeout=HANG_MS)  # followed to the end, without a reload
    assert page.get_by_text("Stopped before the answer was complete.").count() == 0
    assert page.get_by_role("button", name="Stop").count() == 0


@pytest.mark.parametrize("app_url", [0.1], indirect=True)
def test_closing_the_tab_mid_answer_still_finishes_the_answer(app_url, page):
    ask(page, app_url, "Tell me about DynamoDB keys")
    page.get_by_text("You asked").first.wait_for(timeout=HANG_MS)
    context = page.context
    page.close()  # nobody is watching: by default the answer is finished anyway
    reopened = context.new_page()
    reopened.goto(app_url)
    chat_row(reopened, "Tell me about DynamoDB keys").click()
    reopened.get_by_text("out tokens").first.wait_for(timeout=HANG_MS)
    assert reopened.get_by_text("Stopped before the answer was complete.").count() == 0


@pytest.mark.parametrize("app_url", [0.1], indirect=True)
def test_stop_keeps_what_arrived_as_stopped_then_retry_answers(app_url, page):
    ask(page, app_url, "Tell me about DynamoDB keys")
    page.get_by_text("You asked").first.wait_for(timeout=HANG_MS)
    page.get_by_role("button", name="Stop").click()
    page.get_by_text("Stopped before the answer was complete.").wait_for(timeout=HANG_MS)
    page.get_by_text("You asked").first.wait_for()  # the partial answer was kept
    page.screenshot(path=str(ARTIFACTS / "chat-stopped.png"))
    assert page.get_by_text("out tokens").count() == 0
    page.get_by_role("button", name="Retry").click()
    page.get_by_role("button", name="Stop").wait_for(timeout=HANG_MS)  # the retry is being written
    page.wait_for_timeout(1_000)
    # The failed answer is gone at once: not left under the new one, faded, until the retry is saved
    assert page.get_by_text("Stopped before the answer was complete.").count() == 0
    assert page.get_by_role("button", name="Retry").count() == 0
    assert page.get_by_role("button", name="Stop").count() == 1
    page.get_by_text("out tokens").first.wait_for(timeout=HANG_MS)
    assert page.get_by_text("Stopped before the answer was complete.").count() == 0


@pytest.mark.parametrize("app_url", [0.1], indirect=True)
def test_type_ahead_is_refused_with_the_text_kept_then_sent_after_the_answer(app_url, page):
    ask(page, app_url, "Tell me about DynamoDB keys")
    page.get_by_text("You asked").first.wait_for(timeout=HANG_MS)
    box = type_question(page, "and what about sort keys?")
    page.get_by_text("Not sent yet: the answer above is still being written").wait_for(timeout=HANG_MS)
    expect(box).to_have_value("and what about sort keys?", timeout=HANG_MS)  # kept in the box (filled once drawn)
    page.screenshot(path=str(ARTIFACTS / "chat-type-ahead.png"))
    page.get_by_text("out tokens").first.wait_for(timeout=HANG_MS)
    expect(box).to_have_value("and what about sort keys?", timeout=HANG_MS)
    box.press("Enter")
    page.locator(MESSAGES).filter(has_text="and what about sort keys?").first.wait_for(timeout=HANG_MS)
    page.get_by_text("out tokens").nth(1).wait_for(timeout=HANG_MS)
    assert page.locator(MESSAGES).count() == 4


@pytest.mark.parametrize("app_url", [0.1], indirect=True)
def test_a_second_browser_follows_the_answer_live_until_it_is_saved(app_url, page):
    ask(page, app_url, "Tell me about DynamoDB keys")
    page.get_by_text("You asked").first.wait_for(timeout=HANG_MS)
    other = page.context.browser.new_context(viewport={"width": 390, "height": 844}).new_page()  # a phone
    other.goto(page.url)  # the same chat's link
    other.get_by_role("button", name="Stop").wait_for(timeout=HANG_MS)
    answer = other.locator(MESSAGES).nth(1)
    before = len(answer.inner_text())
    deadline = time.monotonic() + HANG_S
    while len(answer.inner_text()) <= before:  # it grows without a reload
        assert time.monotonic() < deadline, "the second browser's answer never grew"
        time.sleep(0.3)
    other.get_by_text("out tokens").first.wait_for(timeout=HANG_MS)
    page.get_by_text("out tokens").first.wait_for(timeout=HANG_MS)
    assert answer.inner_text().count("Start from the queries") == 1


PREPARE_LONG_CHAT = """
from lib.config import Settings
from lib.services import build_services
store = build_services(Settings.load(env={{"CHAT_DATA_DIR": {folder!r}}}, secrets={{}})).store
session, m = store.create_session("dev@localhost", "turn 0", system_prompt_id="default-v1")
ids = [m.message_id]
store.finish_message("dev@localhost", m, output_body="answer 0", input_token=1, output_token=1,
                     response_start_time=m.create_time, response_end_time=m.create_time)
for i in range(1, 45):
    session, m = store.send_message("dev@localhost", session, f"turn {{i}}", system_prompt_id="default-v1")
    ids.append(m.message_id)
    store.finish_message("dev@localhost", m, output_body=f"answer {{i}}", input_token=1, output_token=1,
                         response_start_time=m.create_time, response_end_time=m.create_time)
print(session.session_id, ids[3])
"""


def test_a_link_to_an_old_turn_opens_the_chat_scrolled_to_it(tmp_path, page):
    """Search's result links (`?session=&turn=`): the turn is paged in, marked, and scrolled to."""
    folder = str(tmp_path / "data")
    session_id, turn_id = prepared(PREPARE_LONG_CHAT.format(folder=folder))
    with serve_app(tmp_path) as url:
        page.goto(f"{url}/?session={session_id}&turn={turn_id}")
        page.get_by_text("answer 3", exact=True).wait_for(timeout=HANG_MS)
        linked = page.locator(f".st-key-linked-{turn_id}")
        deadline = time.monotonic() + HANG_S
        while not 0 <= linked.bounding_box()["y"] < 900:  # scrolled into the viewport once the page settled
            assert time.monotonic() < deadline, "the linked turn was never scrolled into view"
            time.sleep(0.2)


def test_a_search_result_opens_its_chat_at_that_turn_in_the_same_tab(app_url, page):
    ask(page, app_url, "How do we rotate the database password?")
    page.get_by_text("out tokens").first.wait_for(timeout=HANG_MS)
    type_question(page, "And what about the invoice archive?")
    page.get_by_text("out tokens").nth(1).wait_for(timeout=HANG_MS)
    page.locator("[data-testid='stSidebar']").get_by_role("link", name="Search").click()
    query = page.get_by_role("textbox").first
    query.wait_for(timeout=HANG_MS)
    result = page.locator("[data-testid='stPageLink-NavLink']").filter(has_text="rotate the database password")
    for _ in range(30):  # the turn's vector is written after its save, by the worker: give it a moment
        query.fill("rotate database password")
        query.press("Enter")
        page.wait_for_timeout(1_000)
        if result.count():
            break
    page.screenshot(path=str(ARTIFACTS / "search-results.png"))
    pages_before = len(page.context.pages)
    result.first.click()
    page.locator("[data-testid='stChatMessage']").filter(
        has_text="How do we rotate the database password?"
    ).first.wait_for(timeout=HANG_MS)
    assert len(page.context.pages) == pages_before  # the same tab, not a new one
    assert "session=" in page.url and page.get_by_text("out tokens").count() == 2
    page.screenshot(path=str(ARTIFACTS / "search-result-opened.png"))
