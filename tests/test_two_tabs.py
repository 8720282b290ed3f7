"""Two tabs of one process on one chat, without Redis: the process knows its own writes, so a tab open on the chat
hears of a turn sent from the other, and a second answer in a chat whose answer is still coming is refused
server-side, with the text kept, whichever tab asks."""

from __future__ import annotations

import pytest

from lib.context.cache import ContextCache
from tests.pages import DEV, generations, new_browser, send, services

pytestmark = pytest.mark.usefixtures("app_env")


def open_id(at):
    value = at.query_params["session"]
    return value[0] if isinstance(value, list) else value


def questions(at) -> list[str]:
    return [m.markdown[0].value for m in at.chat_message if m.name == "user"]


def test_a_tab_open_on_a_chat_shows_a_turn_sent_from_another_tab_on_its_next_run():
    first = send(new_browser(), "first question")
    session_id = open_id(first)
    other = new_browser(session=session_id)  # tab 2, same chat
    send(first, "second question")  # from tab 1
    other.run()  # any run of tab 2 (its change watcher ticks every 2 s in a browser)
    assert not other.exception
    assert questions(other) == ["first question", "second question"]


def test_a_stale_tab_cannot_start_a_second_answer_in_a_chat_whose_answer_is_coming(monkeypatch):
    monkeypatch.setenv("CHAT_DEMO_DELAY", "0.02")
    chat, store = services().chat, services().store
    first = chat.ask(DEV, None, "first question", history=[], summary=None, cache=ContextCache())
    assert first.live.wait(300)
    stale = new_browser(session=first.session.session_id)  # tab 2 loaded the chat before the next answer
    view = store.open_session(DEV, first.session.session_id)
    chat.ask(DEV, view.session, "a long answer please", history=view.messages, summary=None, cache=ContextCache())
    stale.chat_input[0].set_value("from the stale tab").run()  # the run then follows tab 1's answer to its end
    assert not stale.exception
    assert [a.value for a in stale.text_area] == ["from the stale tab"]  # the text is kept
    assert any("still being written" in e.value for e in stale.error)  # and the reason is said
    assert [m.input_body for m in store.all_messages(DEV, first.session.session_id)] == [
        "first question",
        "a long answer please",
    ]
    assert generations().wait_idle(300)
