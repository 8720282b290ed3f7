"""The chat page over answers written by the worker: live view on every tab, Stop, type-ahead, other chats."""
import pytest

from lib.turn.turns import STOPPED
from tests.pages import DEV, button, generations, new_browser, requests_made, send, services, settle, shown_text

pytestmark = pytest.mark.usefixtures("app_env")


@pytest.fixture
def slow_model(app_env, monkeypatch):
    """The demo model at a realistic pace: its answer (about 90 chunks) takes a few seconds."""
    monkeypatch.setenv("CHAT_DEMO_DELAY", "0.05")


def open_id(at):
    value = at.query_params["session"]
    return value[0] if isinstance(value, list) else value


@pytest.mark.usefixtures("slow_model")
class TestLiveView:
    def test_a_second_tab_follows_the_live_answer_without_a_request_then_shows_it_saved(self):
        first = send(new_browser(), "a long answer please", wait=False)
        (live,) = generations().active(DEV)
        second = new_browser(session=open_id(first))  # a reload, another tab, a phone: 2 Queries
        assert second.chat_message[0].markdown[0].value == "a long answer please", second.main
        assert [b.label for b in second.button if b.label == "Stop"] == ["Stop"], (live, second.main)
        assert requests_made(lambda: [second.run() for _ in range(3)]) == []  # watching costs nothing
        assert live.text.startswith(shown_text(second.chat_message[1]).split("*")[0])
        settle(second)
        assert "out tokens" in second.chat_message[1].caption[0].value
        assert not [b for b in second.button if b.label == "Stop"]
        assert requests_made(lambda: second.run()) == []  # once saved, the idle page costs nothing either

    def test_leaving_the_chat_and_coming_back_finds_the_answer_still_coming(self):
        at = send(new_browser(), "keep going while I look elsewhere", wait=False)
        session_id = open_id(at)
        at.sidebar.button[0].click().run()  # New chat: the answer keeps coming
        assert not at.exception and not at.chat_message
        (live,) = generations().active(DEV)
        assert live.saved is None
        at.query_params["session"] = session_id
        at.run()
        assert [b.label for b in at.button if b.label == "Stop"] == ["Stop"] or live.saved is not None
        settle(at)
        (message,) = services().store.open_session(DEV, session_id).messages
        assert message.status == "done" and "demo model" in shown_text(at.chat_message[1])

    def test_stop_saves_what_arrived_as_stopped_with_retry(self):
        at = send(new_browser(), "stop me halfway", wait=False)
        button(at, "Stop").click().run()
        settle(at)
        assert STOPPED in at.warning[0].value and button(at, "Retry")
        (message,) = services().store.open_session(DEV, open_id(at)).messages
        assert message.status == "failed" and message.error == STOPPED
        assert message.output_body.strip() == shown_text(at.chat_message[1]).strip()

    def test_type_ahead_in_the_same_chat_is_refused_with_the_text_kept_in_the_box(self):
        at = send(new_browser(), "the first question", wait=False)
        at.chat_input[0].set_value("my follow-up").run()
        assert not at.exception
        assert "still being written" in at.info[0].value
        assert at.chat_input[0].proto.value == "my follow-up" and at.chat_input[0].proto.set_value
        settle(at)
        assert [m.input_body for m in services().store.open_session(DEV, open_id(at)).messages] == \
            ["the first question"]
        send(at, "my follow-up")  # once the answer is saved, the same text is sent
        stored = services().store.open_session(DEV, open_id(at)).messages
        assert [(m.input_body, m.status) for m in stored] == [("the first question", "done"), ("my follow-up", "done")]

    def test_a_question_in_another_chat_generates_side_by_side(self):
        at = send(new_browser(), "first chat", wait=False)
        at.sidebar.button[0].click().run()  # New chat
        send(at, "second chat", wait=False)
        assert len(generations().active(DEV)) == 2
        settle(at)
        chats = services().store.list_sessions(DEV).items
        assert len(chats) == 2
        for chat in chats:
            (message,) = services().store.open_session(DEV, chat.session_id).messages
            assert message.status == "done"

    def test_the_per_user_cap_refuses_with_the_text_kept(self, monkeypatch):
        monkeypatch.setenv("CHAT_MAX_GENERATIONS_PER_USER", "1")
        at = send(new_browser(), "first chat", wait=False)
        at.sidebar.button[0].click().run()
        send(at, "one too many", wait=False)
        assert "You already have 1 answer being written" in at.error[0].value
        assert at.text_area[0].value == "one too many"
        assert len(services().store.list_sessions(DEV).items) == 1
        settle(at)
