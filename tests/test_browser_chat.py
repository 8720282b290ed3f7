"""The chat page in Chromium: long streamed answers, nothing fetched from chat text, pathological Markdown,
and the page on a phone."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.fake_anthropic import Behaviour, FakeAnthropic
from tests.long_answers import chunks_of, long_answer
from tests.test_browser import (
    ARTIFACTS,
    CHROMIUM,
    HANG_MS,
    ask,
    browser,  # noqa: F401 (the fixture)
    send,
    serve_app,
    type_question,
)

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")

MESSAGES = "[data-testid='stChatMessage']"


@pytest.fixture
def fake_model():
    fake = FakeAnthropic()
    yield fake
    fake.close()


@pytest.fixture
def app_url(tmp_path):
    """The app with the demo model."""
    with serve_app(tmp_path) as url:
        yield url


@pytest.fixture
def claude_app(tmp_path, fake_model):
    """The app with the anthropic provider, pointed at the local fake server."""
    with serve_app(
        tmp_path, ANTHROPIC_API_KEY="sk-test", CHAT_ANTHROPIC_BASE_URL=fake_model.url, CHAT_MODEL_MAX_RETRIES="0"
    ) as url:
        yield url


def new_page(browser, width=1280, height=900):
    page = browser.new_context(viewport={"width": width, "height": height}).new_page()
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.on("console", lambda message: page.errors.append(message.text) if message.type == "error" else None)
    return page


def answered(page, timeout=HANG_MS):
    """Wait until the turn is saved, the page has rerun (the caption under a finished answer), and every
    lazily loaded element (code boxes load their highlighter) has replaced its skeleton."""
    page.get_by_text("out tokens").first.wait_for(timeout=timeout)
    page.wait_for_function("!document.querySelector(\"[data-testid='stSkeleton']\")", timeout=timeout)


class Hits:
    """A local HTTP server that counts every request the browser makes to it."""

    def __init__(self):
        self.paths: list[str] = []
        hits = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                hits.paths.append(self.path)
                self.send_response(200)
                self.send_header("Access-Control-Allow-Origin", "*")
                self.send_header("Content-Type", "image/gif")
                self.end_headers()
                self.wfile.write(b"GIF89a")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hits():
    server = Hits()
    yield server
    server.close()


def test_a_100_kb_answer_streams_and_the_page_then_equals_the_reopened_chat(claude_app, fake_model, browser):
    page = new_page(browser)
    ask(page, claude_app, "A short question first")
    answered(page)
    # A follow-up in the chat at the top is finished in place: the page compared is the streamed one itself.
    text = long_answer(100_000)
    fake_model.enqueue(Behaviour("text", chunks=chunks_of(text), output_tokens=25_000, streamed_only=True))
    box = page.locator("[data-testid='stChatInput'] textarea")
    box.fill("Now write me a long design document")
    send(box)
    page.get_by_text("out tokens").nth(1).wait_for(timeout=HANG_MS)
    # the run that saved it has ended (a long answer is saved to the object store and drawn again, whole)
    page.wait_for_function(
        "!document.querySelector(\"[data-testid='stStatusWidget']\") && "
        "!document.querySelector(\"[data-testid='stSkeleton']\")",
        timeout=HANG_MS,
    )
    answer = page.locator(MESSAGES).nth(3)
    streamed = answer.inner_text()
    fences, tables = text.count("```python"), text.count("| record |")
    assert answer.locator("[data-testid='stCode']").count() == fences
    assert answer.locator("table").count() == tables
    assert "Section 0: keys and access patterns" in streamed and "That is all." in streamed
    session_url = page.url

    reopened = new_page(browser)
    reopened.goto(session_url)
    reopened.get_by_text("out tokens").nth(1).wait_for(timeout=HANG_MS)
    # reopened, a long answer shows its beginning and "Show all"; shown all, it is the streamed page exactly
    reopened.get_by_role("button", name="Show all").click()
    reopened.get_by_role("button", name="Show less").first.wait_for(timeout=HANG_MS)
    reopened.wait_for_function(
        "!document.querySelector(\"[data-testid='stStatusWidget']\") && "
        "!document.querySelector(\"[data-testid='stSkeleton']\")",
        timeout=HANG_MS,
    )
    shown_all = reopened.locator(MESSAGES).nth(3).inner_text()
    assert shown_all.count("Show less") == 2  # at its start and at its end
    assert shown_all.replace("unfold_less\n\nShow less\n\n", "") == streamed  # the toggles it has, less
    assert not page.errors and not reopened.errors


IMAGE_PAYLOADS = """Look: ![inline]({u}/inline?secret=1) and ![a [b]]({u}/nested) and ![x][ref] and
<img src="{u}/html"> and ![![in]({u}/inner)]({u}/outer) and `![code]({u}/code)` and <{u}/autolink>

[ref]: {u}/reference
"""


def test_nothing_in_a_question_an_answer_or_a_title_makes_the_browser_fetch(claude_app, fake_model, browser, hits):
    payloads = IMAGE_PAYLOADS.format(u=hits.url)
    fake_model.enqueue(
        Behaviour("text", chunks=chunks_of(payloads, 7)),  # streamed in small pieces
        Behaviour("text", chunks=[f"![t]({hits.url}/title)"]),
    )  # the model-written title
    page = new_page(browser)
    ask(page, claude_app, payloads)
    answered(page)
    page.reload()
    answered(page)
    page.wait_for_timeout(1000)  # time for any image request to arrive
    assert hits.paths == []
    page.locator(MESSAGES).nth(1).get_by_role("link", name="inline").wait_for()  # an image shows as a link
    # The counter works: a fetch the page really makes is seen.
    page.evaluate(f"fetch('{hits.url}/control').then(r => r.text())")
    page.wait_for_timeout(500)
    assert hits.paths == ["/control"]


def test_pathological_markdown_is_shown_plain_and_the_page_stays_usable(app_url, browser):
    page = new_page(browser)
    ask(page, app_url, ">" * 5000 + " deep\n\n" + "*_" * 20_000)
    answered(page)
    question = page.locator(MESSAGES).first
    assert question.get_by_text("Shown as plain text").count() == 1  # a long question shows its start
    question.get_by_role("button", name="Show all").click()
    question.get_by_role("button", name="Show less").first.wait_for(timeout=HANG_MS)
    page.wait_for_function("!document.querySelector(\"[data-testid='stSkeleton']\")")
    assert question.get_by_text("Shown as plain text").count() == 2
    assert question.locator("[data-testid='stCode']").count() == 2
    page.locator("[data-testid='stSidebar']").get_by_role("button", name="New chat").click()
    page.get_by_text("What can I help with?").wait_for(timeout=HANG_MS)  # the page still answers clicks
    assert not [e for e in page.errors if "Maximum call stack" in e or "Error" in e]


def test_on_a_phone_the_demo_banner_takes_two_lines_at_most_and_suggestions_are_not_cut(app_url, browser):
    page = new_page(browser, 390, 844)
    page.goto(app_url)
    banner = page.get_by_text("Demo mode")
    banner.wait_for(timeout=HANG_MS)
    page.get_by_text("What can I help with?").wait_for()
    page.screenshot(path=str(ARTIFACTS / "chat-phone.png"))
    box = page.locator("[data-testid='stCaptionContainer']").filter(has_text="Demo mode").bounding_box()
    assert box["height"] <= 64  # two lines of caption text (the st.info box it replaces took five)
    for button in page.locator(".st-key-suggestions button p").all():
        assert button.evaluate("p => p.scrollWidth <= p.clientWidth")  # nothing hidden behind an ellipsis


def test_what_the_model_saw_lists_the_parts_of_the_prompt(app_url, browser):
    page = new_page(browser)
    ask(page, app_url, "My name is Ada and I prefer Python.")
    answered(page)
    box = page.locator("[data-testid='stChatInput'] textarea")
    box.fill("Which language should the example use?")
    send(box)
    page.get_by_text("out tokens").nth(1).wait_for(timeout=HANG_MS)
    page.get_by_text("What the model saw").last.click()
    table = page.locator("[data-testid='stDataFrame']")
    table.wait_for(timeout=HANG_MS)
    page.get_by_text("tokens in all").wait_for(timeout=HANG_MS)
    page.screenshot(path=str(ARTIFACTS / "chat-what-the-model-saw.png"), full_page=True)
    assert not [e for e in page.errors if "favicon" not in e]


def test_on_a_phone_picking_a_chat_in_the_sidebar_closes_it_and_shows_the_chat(app_url, browser):
    page = new_page(browser, 390, 844)
    for question in ("First chat about sort keys", "Second chat about partitions"):
        ask(page, app_url, question)
        page.get_by_text("out tokens").first.wait_for(timeout=HANG_MS)
    sidebar = page.locator("[data-testid='stSidebar']")
    page.locator("[data-testid='stExpandSidebarButton']").click()
    row = sidebar.get_by_role("button", name="First chat about sort keys")
    row.wait_for(timeout=HANG_MS)
    assert not sidebar.get_by_text("Keys: Esc").is_visible()  # a phone has no keyboard shortcuts to list
    row.click()
    page.wait_for_function(
        "document.querySelector(\"[data-testid='stSidebar']\").getAttribute('data-collapsed') === 'true'",
        timeout=HANG_MS,
    )
    page.locator(MESSAGES).filter(has_text="First chat about sort keys").first.wait_for(timeout=HANG_MS)
    page.screenshot(path=str(ARTIFACTS / "phone-chat-picked.png"))
    assert page.locator(MESSAGES).filter(has_text="Second chat about partitions").count() == 0


# Every frame while an answer is written, from the first frame the Stop button is in sight above the question box
# (the frames before that are the page catching up with the newly drawn turn): how far its bottom is below the box.
WATCH_STOP = """
window.__stopBelow = [];
const frame = () => {
  const stop = document.querySelector('div[class*="st-key-stop-"] button');
  const box = document.querySelector("[data-testid='stChatInput']");
  if (stop && box) {
    const below = stop.getBoundingClientRect().bottom - box.getBoundingClientRect().top;
    if (window.__stopBelow.length || below <= 0) window.__stopBelow.push(below);
  }
  requestAnimationFrame(frame);
};
requestAnimationFrame(frame);
"""


@pytest.mark.parametrize("width, height", [(1366, 900), (390, 844)])
def test_the_stop_button_stays_above_the_question_box_while_a_long_answer_grows(
    claude_app, fake_model, browser, width, height
):
    page = new_page(browser, width, height)
    ask(page, claude_app, "A short question first")
    answered(page)
    fake_model.enqueue(Behaviour("text", chunks=chunks_of(long_answer(20_000)), chunk_delay_s=0.02, streamed_only=True))
    page.evaluate(WATCH_STOP)
    type_question(page, "Now write me a long design document")
    page.get_by_text("out tokens").nth(1).wait_for(timeout=HANG_MS)
    below = page.evaluate("window.__stopBelow")
    assert below, "the Stop button was never drawn"
    assert max(below) <= 0, f"the Stop button went {max(below):.0f} px under the question box"


def test_on_a_phone_a_tap_on_stop_stops_the_answer_while_it_streams(tmp_path, browser):
    with serve_app(tmp_path, CHAT_DEMO_DELAY="0.2") as url:  # an answer of about 30 s: Stop lands mid-answer
        page = new_page(browser, 390, 844)
        ask(page, url, "Write a long design document")
        page.get_by_text("You asked").first.wait_for(timeout=HANG_MS)  # streaming: the page moves as it grows
        box = page.get_by_role("button", name="Stop").bounding_box()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.mouse.down()  # pressed where it is now and held as long as a finger is, while the page moves on
        page.wait_for_timeout(250)
        page.mouse.up()
        page.get_by_text("Stopped before the answer was complete.").wait_for(timeout=HANG_MS)
        assert page.get_by_role("button", name="Stop").count() == 0
