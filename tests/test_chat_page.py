"""The chat page's polish and its cost per rerun, through AppTest on a real table of the embedded DynamoDB."""

import pytest

from lib.storage.records import Message
from lib.web import turn_view
from lib.web.chat_page import RENAME_POPOVER
from lib.web.chat_view import ContextNotes
from tests.pages import DEV, button, new_browser, requests_made, send, services, shown_text


def a_chat_of(turns: int):
    store = services().store
    session, message = store.create_session(DEV, "turn 0", system_prompt_id="default-v1")
    store.finish_message(
        DEV,
        message,
        output_body="answer 0",
        input_token=1,
        output_token=1,
        response_start_time=message.create_time,
        response_end_time=message.create_time,
        model="demo",
    )
    for i in range(1, turns):
        session, message = store.send_message(DEV, session, f"turn {i}", system_prompt_id="default-v1")
        store.finish_message(
            DEV,
            message,
            output_body=f"answer {i}",
            input_token=1,
            output_token=1,
            response_start_time=message.create_time,
            response_end_time=message.create_time,
            model="demo",
        )
    return session


def pins(at):
    """The marked containers of linked turns (lib.web.turn_view.watch_linked_turns scrolls to one on arrival)."""
    found, todo = [], [at.main]
    while todo:
        node = todo.pop()
        block_id = getattr(getattr(node, "proto", None), "id", "") or ""
        if "-linked-" in block_id:
            found.append(block_id.split("-linked-")[1])
        todo += list(getattr(node, "children", {}).values())
    return found


def user_turns(at):
    return [m.markdown[0].value for m in at.chat_message if m.name == "user"]


@pytest.mark.usefixtures("app_env")
class TestLongChats:
    def test_a_100_turn_chat_draws_at_most_two_pages_of_turns_on_any_rerun(self):
        session = a_chat_of(100)
        at = new_browser(session=session.session_id)
        assert user_turns(at) == [f"turn {i}" for i in range(80, 100)]
        for _ in range(4):
            button(at, "Load earlier messages").click().run()
            assert not at.exception
        # everything is loaded; the page just brought in is open, the pages between are collapsed
        assert [e.label for e in at.expander] == [
            f"Turns {a}–{a + 19} · from {e.label.split('from ')[1]}" for a, e in zip((1, 21, 41, 61), at.expander)
        ]
        assert user_turns(at) == [f"turn {i}" for i in range(0, 20)] + [f"turn {i}" for i in range(80, 100)]
        assert len(at.chat_message) == 80
        assert requests_made(lambda: at.run()) == []  # a rerun reads nothing

    def test_a_link_to_an_old_turn_pages_back_to_it_and_shows_it_marked(self):
        session = a_chat_of(45)
        target = services().store.all_messages(DEV, session.session_id)[3]  # "turn 3", two pages back
        records = requests_made(lambda: new_browser(session=session.session_id, turn=target.message_id))
        assert [(r.operation, r.action) for r in records][:2] == [("Query", "sidebar"), ("Query", "open")]
        assert len([r for r in records if r.operation == "Query"]) == 4  # sidebar, the chat, 2 older pages
        at = new_browser(session=session.session_id, turn=target.message_id)
        assert not at.exception and "turn 3" in user_turns(at)
        assert pins(at) == [target.message_id]
        at.run()
        assert not pins(at)  # the scroll to it, once
        for bad in ("../../etc", "01NOTAVALIDULID", "z" * 26):  # not a turn id: nothing is paged
            records = requests_made(lambda bad=bad: new_browser(session=session.session_id, turn=bad))
            assert [r.operation for r in records] == ["Query", "Query"]

    def test_a_link_to_a_turn_of_the_chat_already_open_is_followed_too(self):
        """Search's results open in the same tab: the chat may be open already, and the link still pages back
        to the turn and scrolls to it, once."""
        session = a_chat_of(45)
        target = services().store.all_messages(DEV, session.session_id)[3]
        at = new_browser(session=session.session_id)
        assert "turn 3" not in user_turns(at)
        at.query_params["turn"] = target.message_id
        at.run()
        assert not at.exception and "turn 3" in user_turns(at) and pins(at)
        assert "turn" not in at.query_params  # followed once: a rerun or a reload does not scroll again
        at.run()
        assert not pins(at)

    def test_a_collapsed_page_is_not_drawn_and_an_opened_one_is(self):
        session = a_chat_of(45)
        at = new_browser(session=session.session_id)
        button(at, "Load earlier messages").click().run()
        button(at, "Load earlier messages").click().run()
        assert [e.label.split(" ·")[0] for e in at.expander] == ["Turns 1–5", "Turns 6–25"]
        assert len(at.chat_message) == 2 * (5 + 20)  # the page just loaded is open, the one between closed
        at.session_state[f"older-{session.session_id}-45-1"] = False
        at.session_state[f"older-{session.session_id}-45-6"] = True
        at.run()
        assert not at.exception
        assert user_turns(at) == [f"turn {i}" for i in range(5, 45)]

    def test_a_summarised_chat_pages_back_in_sections_of_what_each_load_brought(self):
        from lib.storage.records import Summary
        from lib.storage.summaries import SummaryStore

        session = a_chat_of(22)
        turns = services().store.all_messages(DEV, session.session_id)
        database = services().database
        SummaryStore(database.client, database.table).put(
            DEV,
            Summary(
                session.session_id,
                "what came before",
                0,
                turns[10].message_id,
                11,
                "extractive",
                "demo",
                turns[10].create_time,
            ),
            previous=None,
        )
        at = new_browser(session=session.session_id)
        assert user_turns(at) == [f"turn {i}" for i in range(3, 22)]  # the summary took the read's 21st item
        button(at, "Load earlier messages").click().run()
        assert not at.exception
        assert [e.label.split(" ·")[0] for e in at.expander] == ["Turns 1–3"]  # not "Turns 1–2" and turn 3 below
        assert user_turns(at) == [f"turn {i}" for i in range(0, 22)]

    def test_context_notes_in_session_state_are_bounded(self):
        notes = ContextNotes(limit=3)
        for i in range(10):
            notes.add(f"m{i}", f"note {i}")
        assert len(notes) == 3 and notes.get("m9") == "note 9" and notes.get("m6") is None


@pytest.mark.usefixtures("app_env")
class TestFollowUps:
    def test_a_follow_up_costs_one_transaction_before_the_model_and_one_update_after(self):
        at = send(new_browser(), "first question")
        records = requests_made(lambda: send(at, "a follow-up"))
        # The turn's own: 1 transaction before the model, 1 update after. Around them the context engine may
        # recall (SearchVectors) and index the saved turn; the usage ledger's timed flush may land here too.
        assert [(r.operation, r.action) for r in records if r.action in ("send", "finish")] == [
            ("TransactWriteItems", "send"),
            ("UpdateItem", "finish"),
        ]
        assert {r.action for r in records} <= {"send", "finish", "search", "index", "memory", "summary", "ledger"}, [
            (r.operation, r.action) for r in records
        ]
        assert [m.name for m in at.chat_message] == ["user", "assistant", "user", "assistant"]
        last = at.chat_message[3]
        assert "turn 2" in shown_text(last) and "out tokens" in last.caption[0].value
        assert len(at.feedback) == 2
        assert requests_made(lambda: at.run()) == []
        assert [m.name for m in at.chat_message] == ["user", "assistant", "user", "assistant"]


@pytest.mark.usefixtures("app_env")
class TestPolish:
    def test_a_pasted_traceback_and_line_breaks_show_as_typed_live_and_reopened(self):
        from tests.pastes import TRACEBACK

        at = send(new_browser(), f"Why does this fail?\n{TRACEBACK}")
        prose = "Dear team,\nthe release moves to Friday.\nThanks"
        send(at, prose)
        session_id = services().store.list_sessions(DEV).items[0].session_id
        for shown in (at, new_browser(session=session_id)):  # the tab that asked, then the chat reopened
            first, second = [m for m in shown.chat_message if m.name == "user"]
            assert [c.value for c in first.code] == [TRACEBACK]
            assert [m.value for m in first.markdown] == ["Why does this fail?"]
            assert [m.value for m in second.markdown] == ["Dear team,  \nthe release moves to Friday.  \nThanks"]

    def test_a_long_question_is_collapsed_with_show_all(self):
        long_question = "\n".join(f"line {i} " + "x" * 40 for i in range(60))  # 60 short lines
        at = send(new_browser(), long_question)
        question = at.chat_message[0]
        assert "line 24" in shown_text(question) and "line 25" not in shown_text(question)  # the first 25
        hidden = len(long_question) - len(turn_view.preview(long_question))
        button(at, f"Show all ({hidden:,} more characters)").click().run()
        assert "line 59" in shown_text(at.chat_message[0])
        top, _end = [b for b in at.button if b.label == "Show less"]  # one at its start, one at its end
        top.click().run()  # the one at its start folds it back without scrolling to its end
        assert "line 59" not in shown_text(at.chat_message[0])

    def test_an_answer_stopped_inside_a_code_fence_shows_its_code_as_code(self, fake_model):
        from tests.fake_anthropic import Behaviour

        fake_model.enqueue(Behaviour("drop", chunks=["Run this:\n\n```bash\n", "ls -l\n", "echo **not bold**\n"]))
        at = send(new_browser(), "show me")
        answer = at.chat_message[1]
        assert [m.value for m in answer.markdown if not m.is_caption] == ["Run this:"]
        assert [(c.value, c.language) for c in answer.code] == [("ls -l\necho **not bold**", "bash")]
        assert "connection to the model dropped" in at.warning[0].value

    def test_a_retried_answer_is_timed_from_the_retry(self):
        m = Message(
            "m",
            "s",
            "2026-11-06T08:00:00.000Z",
            "q",
            "default-v1",
            status="done",
            response_end_time="2026-11-06T09:00:02.500Z",
            attempt_time="2026-11-06T09:00:00.000Z",
        )
        assert turn_view.answer_seconds(m) == 2.5
        first_try = Message(
            "m",
            "s",
            "2026-11-06T08:00:00.000Z",
            "q",
            "default-v1",
            status="done",
            response_end_time="2026-11-06T08:00:01.000Z",
        )
        assert turn_view.answer_seconds(first_try) == 1.0

    def test_rename_saves_and_closes_its_popover(self):
        at = send(new_browser(), "rename me")
        at.session_state[RENAME_POPOVER] = True
        at.run()
        at.text_input[0].set_value("Renamed chat")
        button(at, "Save").click().run()
        assert not at.exception
        assert at.session_state[RENAME_POPOVER] is False
        assert at.subheader[0].value == "Renamed chat"

    def test_the_copy_popover_draws_the_answer_only_when_opened(self):
        at = send(new_browser(), "copy me")
        assert not [c for c in at.code if c.language == "markdown"]  # closed: the answer is not sent twice
        session_id = services().store.list_sessions(DEV).items[0].session_id
        message_id = services().store.open_session(DEV, session_id).messages[0].message_id
        at.session_state[f"copy-{message_id}"] = True
        at.run()
        (box,) = [c for c in at.code if c.language == "markdown"]
        assert "You asked: *copy me*" in box.value
        (popover,) = [p.proto.popover for p in at.get("popover") if p.proto.popover.label.startswith("Copy")]
        assert popover.label == "Copy…" and "puts it on the clipboard" in popover.help  # says what it does

    def test_sidebar_dates_are_headings_so_the_selected_row_has_no_grey_text(self):
        import datetime as dt

        from lib.web.ui import day_group

        at = send(new_browser(), "first")
        (row,) = [b for b in at.sidebar.button if b.key and b.key.startswith("open-")]
        assert row.proto.type == "primary" and row.label == "First"
        assert [c.value for c in at.sidebar.caption][0] == "Today"
        now = dt.datetime(2026, 11, 30, 9, tzinfo=dt.timezone.utc)
        assert [
            day_group(t, now)
            for t in (
                "2026-11-30T00:00:01.000Z",
                "2026-11-29T23:59:59.000Z",
                "2026-11-24T08:00:00.000Z",
                "2026-11-02T08:00:00.000Z",
                "2026-10-30T08:00:00.000Z",
                "2025-12-30T08:00:00.000Z",
            )
        ] == ["Today", "Yesterday", "Previous 7 days", "Previous 30 days", "October", "December 2025"]

    def test_a_title_with_an_image_is_shown_as_text(self):
        at = send(new_browser(), "title")
        at.session_state[RENAME_POPOVER] = True
        at.run()
        at.text_input[0].set_value("![t](http://127.0.0.1:9/t)")
        button(at, "Save").click().run()
        assert at.subheader[0].value == "\\!\\[t\\]\\(http\\://127\\.0\\.0\\.1\\:9/t\\)"


@pytest.mark.usefixtures("app_env")
class TestDemoHistoryButton:
    def test_behind_a_sign_in_proxy_the_demo_is_written_for_the_user_who_clicked(self, monkeypatch):
        from lib.turn.demo import COLLEAGUES
        from lib.web import ui

        monkeypatch.setenv("CHAT_IDENTITY", "header")
        monkeypatch.setattr(ui, "request_headers", lambda: {"X-Forwarded-Email": "carol@example.com"})
        at = new_browser()
        assert "three weeks of chats: yours and four demo colleagues'" in " ".join(c.value for c in at.caption)
        button(at, "Load demo history").click().run()
        assert not at.exception
        titles = [b for b in at.sidebar.button if b.key and b.key.startswith("open-")]
        assert len(titles) >= 10 and not [b for b in at.button if b.label == "Load demo history"]
        store = services().store
        assert store.list_sessions(DEV).items == []  # nothing for the development user nobody signed in as
        assert all(store.list_sessions(c).items for c in COLLEAGUES)


@pytest.mark.usefixtures("app_env")
class TestWhatTheModelSaw:
    def test_a_reopened_chat_names_the_memory_by_its_text_and_says_what_each_token_count_counts(self):
        at = send(new_browser(), "I prefer Python for examples.")
        send(at, "Which language should the example use?")
        session_id = services().store.list_sessions(DEV).items[0].session_id
        (message,) = [
            m for m in services().store.open_session(DEV, session_id).messages if m.input_body.startswith("Which")
        ]
        if not [p for p in message.context if p["kind"] == "memory"]:
            pytest.skip("the demo extractor kept no memory from the first question")
        reopened = new_browser(session=session_id)  # a new browser session: no memory in its cache
        reopened.session_state[f"saw-{message.message_id}"] = True
        reopened.run()
        what = dict(zip(reopened.dataframe[0].value["Part"], reopened.dataframe[0].value["What"]))
        assert what["Memory"] == "I prefer Python for examples."  # its text, not its id
        (caption,) = [c.value for c in reopened.caption if "tokens in all" in c.value]
        assert f"the model counted {message.input_token:,} input tokens" in caption


@pytest.mark.usefixtures("app_env")
class TestNoRerunBeforeTheFirstText:
    def test_a_follow_up_that_moves_the_chat_up_the_sidebar_reruns_only_once_its_answer_is_saved(self, monkeypatch):
        import streamlit as st

        from lib.web import chat_page
        from tests.pages import generations, sidebar_titles

        monkeypatch.setenv("CHAT_DEMO_DELAY", "0.02")  # an answer that streams for a while (never timed)
        older = a_chat_of(2)
        a_chat_of(1)  # newer: the older chat is second in the sidebar
        at = new_browser(session=older.session_id)
        assert sidebar_titles(at)[1] == "turn 0"
        reruns = []
        real = st.rerun

        def spy(*args, **kwargs):  # how many answers were still being written when the page asked to rerun
            reruns.append(len(generations().active(DEV)))
            return real(*args, **kwargs)

        monkeypatch.setattr(chat_page.st, "rerun", spy)
        send(at, "a follow-up in the older chat")
        assert reruns and reruns[0] == 0  # the first rerun came after the save, never before the first text
        assert sidebar_titles(at)[0] == "turn 0"  # and the chat is at the top once it is
