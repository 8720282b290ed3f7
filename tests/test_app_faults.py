"""Faults seen through the page: the user gets a clear message, and neither question nor answer is lost."""

import pytest

from tests.fake_anthropic import Behaviour
from tests.faults import Faults
from tests.pages import DEV, button, generations, new_browser, send, services, settle, shown_text

pytestmark = pytest.mark.usefixtures("app_env", "no_backoff_sleep")


def stored(session_index=0):
    store = services().store
    session_id = store.list_sessions(DEV).items[session_index].session_id
    return store.open_session(DEV, session_id).messages


class TestDatabaseFaults:
    def test_a_send_throttled_past_retries_keeps_the_question_and_says_so(self):
        at = new_browser()
        Faults(services().database.client).fail("TransactWriteItems", "ThrottlingException", times=5)
        send(at, "please keep me", wait=False)
        assert "nothing was lost" in at.error[0].value
        assert at.text_area[0].value == "please keep me"
        assert services().store.list_sessions(DEV).items == []

    def test_a_failed_finish_is_retried_by_the_worker_while_the_page_follows_then_shown_saved(self):
        at = new_browser()
        # 5 attempts for the save after streaming, 5 more for the worker's second try; the third succeeds.
        # The page follows meanwhile (the warning it shows then is tested in tests/test_live_view.py).
        Faults(services().database.client).fail("UpdateItem", "ThrottlingException", times=10)
        send(at, "answer me", wait=False)
        assert not at.warning and stored()[0].status == "done"
        assert "demo model" in shown_text(at.chat_message[1])
        assert "out tokens" in at.chat_message[1].caption[0].value

    def test_a_save_refused_past_the_deadline_ends_the_following_page_with_interrupted_and_retry(self, monkeypatch):
        monkeypatch.setenv("CHAT_PENDING_TIMEOUT_S", "1")  # the worker's save deadline: given up after one wait
        at = new_browser()
        faults = Faults(services().database.client)
        faults.fail("UpdateItem", "ThrottlingException", times=1_000)
        send(at, "answer me", wait=False)  # returns: the page does not follow an answer nobody will save
        (live,) = [g for g in [generations().get(stored()[0].message_id)] if g is not None]
        assert live.given_up
        assert "Interrupted" in at.warning[0].value and button(at, "Retry")
        assert stored()[0].status == "pending"  # what DynamoDB has: the question, kept
        faults.clear()
        button(at, "Retry").click().run()
        assert not at.exception and stored()[0].status == "done"
        assert "out tokens" in at.chat_message[1].caption[0].value


class TestModelFaults:
    def test_overloaded_before_the_first_token_fails_the_turn_then_retry_answers(self, fake_model):
        fake_model.enqueue(Behaviour("status", status=529))
        at = send(new_browser(), "are you there?")
        assert "overloaded" in at.warning[0].value
        assert [(m.status, m.output_body) for m in stored()] == [("failed", "")]
        settle(button(at, "Retry").click().run())
        assert [(m.status, m.output_body) for m in stored()] == [("done", "Hello from the fake model.")]

    def test_a_drop_after_the_last_token_keeps_the_whole_text_then_retry_finishes(self, fake_model):
        fake_model.enqueue(Behaviour("drop", chunks=["Every ", "token ", "arrived."]))
        at = send(new_browser(), "almost")
        assert [(m.status, m.output_body) for m in stored()] == [("failed", "Every token arrived.")]
        settle(button(at, "Retry").click().run())
        assert not at.exception and stored()[0].status == "done"


KILLED = """
import os, time
from lib.config import Settings
from lib.services import build_services
from lib.model.models import DemoModel
from lib.turn.turns import begin_turn
from lib.turn.worker import Generations
services = build_services(Settings.load(env={{"CHAT_DATA_DIR": {folder!r}, "CHAT_TABLE": {table!r}}}, secrets={{}}))
turn = begin_turn(services.store, DemoModel(delay_s=0.05), "dev@localhost", None, "did my question survive?", [],
                  system_prompt_id="default-v1", budget_tokens=1000)
live = Generations().start(turn)  # the worker streams the answer...
while live.chunks < 3:
    time.sleep(0.01)
print(turn.session.session_id, flush=True)
os._exit(9)  # ...and the process is killed: the worker dies with it, no finish, no fail, no atexit
"""


class TestProcessDeath:
    def test_a_process_killed_mid_answer_leaves_an_interrupted_turn_that_retry_completes(self, tmp_path, monkeypatch):
        import subprocess
        import sys
        import textwrap
        from pathlib import Path

        folder, table = str(tmp_path / "data"), "killed-chat"
        run = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(KILLED.format(folder=folder, table=table))],
            cwd=Path(__file__).resolve().parents[1],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 9, run.stderr
        session_id = run.stdout.split()[0]
        monkeypatch.setenv("CHAT_DATA_DIR", folder)
        monkeypatch.setenv("CHAT_TABLE", table)
        # The local database has one process: no pending timeout to wait for, only the start-up grace
        monkeypatch.setattr("lib.web.live_turns.ORPHAN_GRACE_S", 0.0)
        at = new_browser(session=session_id)
        assert at.chat_message[0].markdown[0].value == "did my question survive?"
        assert "Interrupted" in at.warning[0].value
        settle(button(at, "Retry").click().run())
        (message,) = services().store.open_session(DEV, session_id).messages
        assert message.status == "done" and "demo model" in message.output_body
