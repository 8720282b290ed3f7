"""Faults seen through the page: the user gets a clear message, and neither question nor answer is lost."""
import pytest

from tests.fake_anthropic import Behaviour
from tests.faults import Faults
from tests.pages import DEV, button, new_browser, send, services

pytestmark = pytest.mark.usefixtures("app_env", "no_backoff_sleep")


def stored(session_index=0):
    store = services().store
    session_id = store.list_sessions(DEV).items[session_index].session_id
    return store.open_session(DEV, session_id).messages


class TestDatabaseFaults:
    def test_a_send_throttled_past_retries_keeps_the_question_and_says_so(self):
        at = new_browser()
        Faults(services().database.client).fail("TransactWriteItems", "ThrottlingException", times=5)
        send(at, "please keep me")
        assert "nothing was lost" in at.error[0].value
        assert at.text_area[0].value == "please keep me"
        assert services().store.list_sessions(DEV).items == []

    def test_a_failed_finish_keeps_the_answer_on_screen_and_saves_it_on_the_next_run(self):
        at = new_browser()
        # 5 attempts for the save after streaming, 5 more for the retry on the rerun that follows it
        Faults(services().database.client).fail("UpdateItem", "ThrottlingException", times=10)
        send(at, "answer me")
        assert "not saved yet" in at.warning[0].value
        assert "demo model" in at.chat_message[1].markdown[0].value
        assert stored()[0].status == "pending"
        at.run()
        assert not at.warning and stored()[0].status == "done"
        assert "out tokens" in at.chat_message[1].caption[0].value


class TestModelFaults:
    def test_overloaded_before_the_first_token_fails_the_turn_then_retry_answers(self, fake_model):
        fake_model.enqueue(Behaviour("status", status=529))
        at = send(new_browser(), "are you there?")
        assert "overloaded" in at.warning[0].value
        assert [(m.status, m.output_body) for m in stored()] == [("failed", "")]
        button(at, "Retry").click().run()
        assert [(m.status, m.output_body) for m in stored()] == [("done", "Hello from the fake model.")]

    def test_a_drop_after_the_last_token_keeps_the_whole_text_then_retry_finishes(self, fake_model):
        fake_model.enqueue(Behaviour("drop", chunks=["Every ", "token ", "arrived."]))
        at = send(new_browser(), "almost")
        assert [(m.status, m.output_body) for m in stored()] == [("failed", "Every token arrived.")]
        button(at, "Retry").click().run()
        assert not at.exception and stored()[0].status == "done"
