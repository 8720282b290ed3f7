"""The chat page over answers written by the worker: a page that opens a chat mid-answer follows it in its own
run until it is saved and finishes it in place; Stop from elsewhere; the per-user cap.

AppTest returns when a run ends, and a following run ends when the answer is saved: what a person sees and
does mid-answer (Stop, type-ahead, leaving and coming back, a second browser) is in tests/test_browser.py."""

import threading

import pytest

from lib.turn.turns import STOPPED
from tests.pages import DEV, button, generations, new_browser, requests_made, send, services, shown_text
from tests.turn_helpers import turn_for, wait_for

pytestmark = pytest.mark.usefixtures("app_env")


@pytest.fixture
def slow_model(app_env, monkeypatch):
    """The demo model at a realistic pace: its answer (about 90 chunks) takes a few seconds."""
    monkeypatch.setenv("CHAT_DEMO_DELAY", "0.05")


def start_answer(question):
    """An answer this process's worker is writing, as another tab's send leaves it (AppTest's own send would
    follow it to the end before returning)."""
    gens = generations()
    gens.admit(DEV)
    return gens.start(turn_for(services().store, services().model, DEV, question))


def opened(session_id):
    """A tab opening the chat: the page (after its run ends) and the requests the page made (the worker's own
    save, 1 UpdateItem, counts under 'finish')."""
    pages = []
    records = requests_made(lambda: pages.append(new_browser(session=session_id)))
    return pages[0], [(r.operation, r.action) for r in records if r.action != "finish"]


@pytest.mark.usefixtures("slow_model")
class TestFollowing:
    def test_a_tab_opened_mid_answer_follows_it_without_a_request_and_finishes_it_in_place(self):
        live = start_answer("a long answer please")
        assert not live.wait(0)  # still being written when the tab opens the chat
        at, operations = opened(live.session_id)
        assert live.saved is not None and live.saved.status == "done"
        _, reopened = opened(live.session_id)
        assert operations == reopened  # following the answer for seconds cost no request beyond the opening
        answer = at.chat_message[1]
        assert shown_text(answer).strip() == live.saved.output_body.strip()
        assert "out tokens" in answer.caption[0].value  # the footer, drawn under the followed answer
        assert not [b for b in at.button if b.label == "Stop"]
        assert requests_made(lambda: at.run()) == []  # once saved, the idle page costs nothing

    def test_stop_from_another_tab_ends_the_followed_answer_with_what_arrived_and_retry(self):
        live = start_answer("stop me halfway")

        def other_tab_clicks_stop():
            wait_for(lambda: len(live.text) > 40)
            generations().stop(live.message_id)

        threading.Thread(target=other_tab_clicks_stop, daemon=True).start()
        at, _ = opened(live.session_id)
        assert STOPPED in at.warning[0].value
        (message,) = services().store.open_session(DEV, live.session_id).messages
        assert message.status == "failed" and message.error == STOPPED
        assert message.output_body.strip() == shown_text(at.chat_message[1]).strip()
        button(at, "Retry").click().run()  # the retried answer is followed by this run, to its end
        assert not at.exception and "out tokens" in at.chat_message[1].caption[0].value
        (message,) = services().store.open_session(DEV, live.session_id).messages
        assert message.status == "done"

    def test_the_per_user_cap_refuses_with_the_text_kept(self, monkeypatch):
        monkeypatch.setenv("CHAT_MAX_GENERATIONS_PER_USER", "1")
        live = start_answer("first chat")
        at = send(new_browser(), "one too many", wait=False)
        assert "You already have 1 answer being written" in at.error[0].value
        assert at.text_area[0].value == "one too many"
        assert [s.session_id for s in services().store.list_sessions(DEV).items] == [live.session_id]
        assert live.wait(300)
