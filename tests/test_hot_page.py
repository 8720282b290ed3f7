"""The chat page with the hot tier (CHAT_REDIS_URL) on a real redis-server: a second replica shows the live
answer, a tab learns of a turn sent elsewhere, a cached chat opens without the Query, Redis down is quiet."""
from __future__ import annotations

import contextlib

import pytest

from tests.pages import DEV, new_browser, requests_made, send, services, settle, shown_text
from tests.redis_server import redis_server  # noqa: F401 (the fixture)

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


def test_a_second_replica_shows_the_live_answer_from_redis_without_dynamodb_requests(hot_env, monkeypatch):
    first = send(new_browser(), "a long answer please", wait=False)
    with replica_b(monkeypatch):
        other = new_browser(session=open_id(first))
        assert [b.label for b in other.button if b.label == "Stop"] == ["Stop"]
        assert requests_made(lambda: [other.run() for _ in range(3)]) == []
    settle(first)
    with replica_b(monkeypatch):
        other.run()  # the fragment sees the saved turn in Redis; the page reruns with it
        other.run()
        assert not other.exception
        assert "out tokens" in other.chat_message[1].caption[0].value
        assert shown_text(other.chat_message[1]) == shown_text(first.chat_message[1])


def test_stop_on_the_second_replica_stops_the_answer(hot_env, monkeypatch):
    first = send(new_browser(), "stop me from elsewhere", wait=False)
    with replica_b(monkeypatch):
        other = new_browser(session=open_id(first))
        [b for b in other.button if b.label == "Stop"][0].click().run()
    settle(first)
    (message,) = services().store.open_session(DEV, open_id(first)).messages
    assert message.status == "failed" and message.error == "Stopped before the answer was complete."


def test_a_tab_learns_of_a_turn_sent_elsewhere_and_a_cached_chat_opens_without_the_query(hot_env):
    first = send(new_browser(), "first question")
    session_id = open_id(first)
    watcher = new_browser(session=session_id)
    assert len(watcher.chat_message) == 2
    send(first, "sent from the other tab")
    records = requests_made(lambda: watcher.run())  # its change watcher sees the counter move
    assert [r.operation for r in records] == ["Query"]
    assert [m.markdown[0].value for m in watcher.chat_message if m.name == "user"] == \
        ["first question", "sent from the other tab"]
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
