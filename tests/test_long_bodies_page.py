"""The chat page with bodies in the object store: the beginning shows with "Show all (size)", which reads the whole
body once (1 GetObject); a lost object is an error on the page, never empty text. AppTest, the embedded database
in memory (its object store in memory too)."""

from __future__ import annotations

from lib.storage import keys
from tests.pages import DEV, button, new_browser, requests_made, services, shown_text


def long_chat(question: str, answer: str):
    store = services().store
    session, message = store.create_session(DEV, question, system_prompt_id="default-v1")
    saved = store.finish_message(
        DEV,
        message,
        output_body=answer,
        input_token=1,
        output_token=1,
        response_start_time=keys.now(),
        response_end_time=keys.now(),
    )
    return session, saved


class TestShowAll:
    def test_a_long_question_and_answer_show_their_beginning_then_all_on_request(self, app_env):
        question = "".join(f"question line {i}\n" for i in range(3000))  # about 52 KB
        answer = "".join(f"answer paragraph {i}.\n\n" for i in range(3000))
        session, saved = long_chat(question, answer)
        opened = []
        records = requests_made(lambda: opened.append(new_browser(session=session.session_id)))
        at = opened[0]
        assert not at.exception
        assert [r.operation for r in records if r.kind == "object"] == []  # opening reads no object
        asked, answered = at.chat_message[0], at.chat_message[1]
        assert "question line 0" in shown_text(asked) and "question line 2999" not in shown_text(asked)
        assert "answer paragraph 0." in shown_text(answered) and "answer paragraph 2999." not in shown_text(answered)
        records = requests_made(lambda: button(at, f"Show all ({len(answer) // 1024} KB)").click().run())
        assert [r.operation for r in records if r.kind == "object"] == ["GetObject"]
        assert "answer paragraph 2999." in shown_text(at.chat_message[1])
        records = requests_made(lambda: at.run())  # a rerun keeps it: no second read
        assert [r.operation for r in records if r.kind == "object"] == []
        assert "answer paragraph 2999." in shown_text(at.chat_message[1])
        button(at, f"Show all ({len(question) // 1024} KB)").click().run()
        assert "question line 2999" in shown_text(at.chat_message[0])
        assert not at.exception

    def test_a_lost_object_is_said_on_the_page_and_the_beginning_still_shows(self, app_env):
        session, saved = long_chat("short question", "the answer begins here. " + "more words " * 5000)
        services().database.objects.delete_key(saved.output_ref.key)
        at = new_browser(session=session.session_id)
        button(at, f"Show all ({saved.output_ref.size // 1024} KB)").click().run()
        assert not at.exception
        assert any("missing from the object store" in e.value for e in at.error)
        assert "the answer begins here." in shown_text(at.chat_message[1])
