"""The chat page with the hot tier (CHAT_REDIS_URL) on a real redis-server: a second replica shows the live
answer, a tab learns of a turn sent elsewhere, a cached chat opens without the Query, Redis down is quiet, and
an answer's versions made and switched on one replica are seen on the other."""

from __future__ import annotations

import contextlib
import threading

import pytest

from lib.turn.turns import STOPPED
from tests.pages import DEV, generations, new_browser, requests_made, send, services, settle, shown_text
from tests.redis_server import redis_server  # noqa: F401 (the fixture)
from tests.turn_helpers import turn_for, wait_for

pytestmark = pytest.mark.usefixtures("app_env")


@pytest.fixture
def hot_env(app_env, redis_server, monkeypatch):
    monkeypatch.setenv("CHAT_REDIS_URL", redis_server.url)
    monkeypatch.setenv("CHAT_DEMO_DELAY", "0.05")
    return redis_server


@contextlib.contextmanager
def replica_b(monkeypatch):
    """Runs inside are served by 'another replica': its own generation registry and Redis client (a different
    setting gives a different cached registry), the same table and Redis."""
    monkeypatch.setenv("CHAT_MAX_GENERATIONS", "99")
    try:
        yield
    finally:
        monkeypatch.delenv("CHAT_MAX_GENERATIONS")


def open_id(at):
    value = at.query_params["session"]
    return value[0] if isinstance(value, list) else value


def start_answer(question):
    """An answer this replica's worker is writing (its live copy in Redis), as a send on this replica leaves
    it: AppTest's own send would follow it to the end before returning."""
    gens = generations()
    gens.admit(DEV)
    return gens.start(turn_for(services().store, services().model, DEV, question))


def test_a_second_replica_follows_the_live_answer_from_redis_without_dynamodb_requests(hot_env, monkeypatch):
    live = start_answer("a long answer please")
    assert not live.wait(0)
    with replica_b(monkeypatch):
        pages = []
        records = requests_made(lambda: pages.append(new_browser(session=live.session_id)))
        other = pages[0]
        assert live.saved is not None  # the page followed the answer from Redis until it was saved
        assert [(r.operation, r.action) for r in records if r.action != "finish"] == [
            ("Query", "sidebar"),
            ("Query", "open"),
        ]
        assert not other.exception
        assert "out tokens" in other.chat_message[1].caption[0].value  # finished in place
        assert shown_text(other.chat_message[1]).strip() == live.saved.output_body.strip()


def test_stop_on_the_second_replica_stops_the_answer_its_page_follows(hot_env, monkeypatch):
    live = start_answer("stop me from elsewhere")
    with replica_b(monkeypatch):
        gens_b = generations()

        def stop_clicked_on_b():  # what the Stop button's callback does on the replica without the worker
            wait_for(lambda: len(live.text) > 40)
            assert not gens_b.stop(live.message_id)
            gens_b.hot.request_stop(live.message_id, STOPPED)

        threading.Thread(target=stop_clicked_on_b, daemon=True).start()
        other = new_browser(session=live.session_id)  # follows from Redis until the stopped turn is saved
        assert STOPPED in other.warning[0].value and [b for b in other.button if b.label == "Retry"]
    (message,) = services().store.open_session(DEV, live.session_id).messages
    assert message.status == "failed" and message.error == STOPPED
    assert message.output_body.strip() == shown_text(other.chat_message[1]).strip()


def test_a_tab_learns_of_a_turn_sent_elsewhere_and_a_cached_chat_opens_without_the_query(hot_env):
    first = send(new_browser(), "first question")
    session_id = open_id(first)
    watcher = new_browser(session=session_id)
    assert len(watcher.chat_message) == 2
    send(first, "sent from the other tab")
    records = requests_made(lambda: watcher.run())  # its change watcher sees the counter move
    assert [r.operation for r in records] == ["Query"]
    assert [m.markdown[0].value for m in watcher.chat_message if m.name == "user"] == [
        "first question",
        "sent from the other tab",
    ]
    records = requests_made(lambda: new_browser(session=session_id))  # a reload, another device
    assert [(r.operation, r.action) for r in records] == [("Query", "sidebar")]  # the chat came from Redis
    assert requests_made(lambda: watcher.run()) == []  # nothing changed: no request


def test_redis_down_the_page_keeps_working_and_says_nothing_alarming(hot_env):
    hot_env.kill()
    at = send(new_browser(), "is anybody there?")
    assert not at.exception and not at.error and not at.warning
    assert "out tokens" in at.chat_message[1].caption[0].value
    again = new_browser(session=open_id(at))
    assert not again.error and not again.warning and len(again.chat_message) == 2


def test_redis_down_an_admin_is_told_in_the_sidebar_and_nobody_else(hot_env, monkeypatch):
    monkeypatch.setenv("CHAT_ADMINS", "someone.else@example.com")
    hot_env.kill()
    at = send(new_browser(), "is anybody there?")
    assert not at.sidebar.warning  # not an admin: the chat works, nothing alarming
    monkeypatch.setenv("CHAT_ADMINS", DEV)  # (a new setting: a new process's services, Redis still down)
    admin = send(new_browser(), "and now?")
    admin.run()
    (line,) = admin.sidebar.warning
    assert "Redis has not answered since" in line.value and "DynamoDB alone" in line.value


def _click(at, key):
    (found,) = [b for b in at.button if b.key == key]
    found.click().run()
    assert not at.exception, at.exception


def test_a_version_made_on_one_replica_is_seen_and_switched_back_on_the_other(hot_env, monkeypatch):
    asked = send(new_browser(), "Name three DynamoDB limits")
    session_id = open_id(asked)
    with replica_b(monkeypatch):
        watcher = new_browser(session=session_id)  # the same chat open on the other replica
    (turn,) = services().store.open_session(DEV, session_id).messages
    settle(asked)
    _click(asked, f"regen-{turn.message_id}")  # a second answer, written by replica A
    settle(asked)
    assert "2 / 2" in [c.value for c in asked.caption]
    with replica_b(monkeypatch):
        records = requests_made(lambda: watcher.run())  # its change watcher sees the counter move in Redis
        assert [r.operation for r in records] == ["Query"]
        assert "2 / 2" in [c.value for c in watcher.caption]
        _click(watcher, f"ver-prev-{turn.message_id}")  # switched back to the first answer on replica B
        assert "1 / 2" in [c.value for c in watcher.caption]
    asked.run()  # replica A's tab learns of it the same way
    assert "1 / 2" in [c.value for c in asked.caption]
    (back,) = services().store.open_session(DEV, session_id).messages
    assert back.version == 1 and back.output_body == turn.output_body
    fresh = new_browser(session=session_id)  # the first answer, as a newly opened tab shows it
    assert shown_text(asked.chat_message[1]) == shown_text(fresh.chat_message[1])
