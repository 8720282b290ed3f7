"""What a first-time user trips on, in Chromium: a pasted traceback shown as typed, a search result that opens its
chat at the turn found (and keeps it there), and an address bar that always names the chat on screen."""

import pytest

from tests.pastes import TRACEBACK
from tests.test_browser import (
    ARTIFACTS,
    CHROMIUM,
    HANG_MS,
    browser,  # noqa: F401 (the fixture)
    idle,
    prepared,
    serve_app,
    type_question,
)

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")

MESSAGES = "[data-testid='stChatMessage']"


def new_page(browser, width=1366, height=900):
    return browser.new_context(viewport={"width": width, "height": height}).new_page()


def test_a_pasted_traceback_shows_as_typed_in_the_chat_and_after_a_reload(tmp_path, browser):
    with serve_app(tmp_path, CHAT_DEMO_DELAY="0") as url:
        page = new_page(browser)
        page.goto(url)
        page.locator("[data-testid='stChatInput'] textarea").wait_for(timeout=HANG_MS)
        type_question(page, f"Why does this fail?\n{TRACEBACK}")
        page.get_by_text("out tokens").first.wait_for(timeout=HANG_MS)
        for moment in ("asked", "reloaded"):
            question = page.locator(MESSAGES).first
            question.locator("[data-testid='stCode']").first.wait_for(timeout=HANG_MS)
            code = question.locator("[data-testid='stCode'] code").inner_text()
            assert code.strip("\n") == TRACEBACK, moment  # every line and its indentation, as pasted
            assert question.get_by_text("Why does this fail?").count() == 1
            idle(page)
            question.screenshot(path=str(ARTIFACTS / f"question-traceback-{moment}.png"))
            page.reload()
            page.get_by_text("out tokens").first.wait_for(timeout=HANG_MS)
        phone = new_page(browser, 390, 844)
        phone.goto(page.url)
        phone.locator(MESSAGES).first.locator("[data-testid='stCode']").wait_for(timeout=HANG_MS)
        idle(phone)
        phone.locator(MESSAGES).first.screenshot(path=str(ARTIFACTS / "question-traceback-phone.png"))


PREPARE_CHATS = """
from lib.config import Settings
from lib.model.models import demo_answer
from lib.services import build_services
svc = build_services(Settings.load(env={{"CHAT_DATA_DIR": {folder!r}}}, secrets={{}}))
store, user = svc.store, "dev@localhost"

def chat(title, questions):
    session, ids = None, []
    for q in questions:
        if session is None:
            session, m = store.create_session(user, q, system_prompt_id="default-v1", title=title)
        else:
            session, m = store.send_message(user, session, q, system_prompt_id="default-v1")
        store.finish_message(user, m, output_body=demo_answer(q), input_token=1, output_token=1,
                             response_start_time=m.create_time, response_end_time=m.create_time)
        ids.append(m.message_id)
    svc.indexer.index_turns(user, title, store.all_messages(user, session.session_id))
    return ids

long = chat("Quarterly tables review", [
    "How do we rotate the kumquat database password?" if i == 4 else f"Question {{i}} about the sort keys"
    for i in range(22)
])
short = chat("Invoice archive", ["Where does the zebra invoice archive live?", "And who can read it?"])
print(long[4], short[0])
"""

# Records, as the browser paints them, whether the linked turn is in the viewport and where: an IntersectionObserver
# reports after layout, so its entries are what the reader saw, from the first frame the turn was drawn.
WATCH_LINKED = """
window.__seen = [];
const watch = new IntersectionObserver((entries) => {
  for (const e of entries) {
    if (e.target.isConnected) window.__seen.push([e.isIntersecting, Math.round(e.boundingClientRect.top)]);
  }
});
new MutationObserver(() => {
  for (const turn of document.querySelectorAll('div[class*="st-key-linked-"]')) {
    if (!turn.__watched) { turn.__watched = true; watch.observe(turn); }  // a redraw may replace the node
  }
}).observe(document, {childList: true, subtree: true});
"""


def open_result(page, url, query, title):
    page.goto(f"{url}/search?q={query}")
    link = page.locator("[data-testid='stPageLink-NavLink']").filter(has_text=title)
    link.first.wait_for(timeout=HANG_MS)
    page.evaluate(WATCH_LINKED)
    link.first.click()


@pytest.mark.parametrize("width, height", [(1366, 900), (390, 844)])
def test_a_search_result_opens_its_chat_at_the_turn_found_marked_and_it_stays_there(tmp_path, browser, width, height):
    long_turn, short_turn = prepared(PREPARE_CHATS.format(folder=str(tmp_path / "data")))
    with serve_app(tmp_path) as url:
        page = new_page(browser, width, height)
        for round, (query, title, turn) in enumerate(
            [
                ("kumquat password", "Quarterly tables review", long_turn),
                ("zebra invoice archive", "Invoice archive", short_turn),
                ("kumquat password", "Quarterly tables review", long_turn),  # again, from the other chat
            ]
        ):
            open_result(page, url, query, title)
            linked = page.locator(f".st-key-linked-{turn}")
            linked.wait_for(timeout=HANG_MS)
            idle(page)
            page.wait_for_timeout(2_500)  # a hold, not a deadline: nothing may pull the page away meanwhile
            seen = page.evaluate("window.__seen")
            box = linked.bounding_box()
            page.screenshot(path=str(ARTIFACTS / f"search-linked-{width}-{round}.png"))
            # In view from its first frame; or, at most for that first frame, below it (where it is drawn before it
            # is pinned), never above it (the page pulled past it to the bottom); then never out of view again.
            assert seen and (seen[0][0] or seen[0][1] > 0), f"round {round}: the page was past the turn: {seen}"
            assert all(entry[0] for entry in seen[1:]), f"round {round}: the turn left the viewport: {seen}"
            assert 0 <= box["y"] < height / 2, f"round {round}: the turn is at {box['y']} px"
            assert "session=" in page.url


def address(page):
    return page.evaluate("window.location.search")


def test_the_address_bar_names_the_chat_on_screen_from_the_first_answer_on(tmp_path, browser):
    with serve_app(tmp_path, CHAT_DEMO_DELAY="0.1") as url:  # a slow answer: the page's run follows it
        page = new_page(browser)
        page.goto(url)
        page.locator("[data-testid='stChatInput'] textarea").wait_for(timeout=HANG_MS)
        type_question(page, "Tell me about DynamoDB keys")
        page.get_by_role("button", name="Stop").wait_for(timeout=HANG_MS)  # the answer is still coming
        page.wait_for_function("window.location.search.includes('session=')", timeout=HANG_MS)
        assert page.get_by_role("button", name="Stop").count() == 1  # named while the answer streams
        first = address(page)
        page.get_by_text("out tokens").first.wait_for(timeout=HANG_MS)

        page.locator("[data-testid='stSidebar']").get_by_role("button", name="New chat").click()
        page.get_by_text("What can I help with?").wait_for(timeout=HANG_MS)
        page.wait_for_function("!window.location.search.includes('session=')", timeout=HANG_MS)
        page.reload()  # the reload gives what was on screen: a new chat
        page.get_by_text("What can I help with?").wait_for(timeout=HANG_MS)

        page.goto(f"{url}/?session=01JC3Q8Z4F6M2V9K7T5R1N0B8D")  # a made-up id
        page.get_by_text("Chat not found").wait_for(timeout=HANG_MS)
        type_question(page, "A question sent from Chat not found")
        page.get_by_role("button", name="Stop").wait_for(timeout=HANG_MS)
        page.wait_for_function(
            "window.location.search.includes('session=') && !window.location.search.includes('01JC3Q8Z4F6M')",
            timeout=HANG_MS,
        )
        second = address(page)
        assert second != first
        page.get_by_text("out tokens").first.wait_for(timeout=HANG_MS)
        page.reload()
        page.locator(MESSAGES).filter(has_text="A question sent from Chat not found").first.wait_for(timeout=HANG_MS)
        assert address(page) == second
