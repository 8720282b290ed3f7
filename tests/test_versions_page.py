"""Regenerate, Edit and switching versions on the chat page (AppTest on the embedded table)."""

import pytest

from lib.storage.records import DONE
from tests.pages import DEV, new_browser, send, services, settle

pytestmark = pytest.mark.usefixtures("app_env")


def open_id(at):
    value = at.query_params["session"]
    return value[0] if isinstance(value, list) else value


def stored(at):
    return services().store.open_session(DEV, open_id(at)).messages


def edit_popovers(at) -> int:
    return sum(p.proto.popover.label == "Edit" for p in at.get("popover"))


def click(at, key):
    (found,) = [b for b in at.button if b.key == key]
    found.click().run()
    assert not at.exception, at.exception
    return at


class TestRegenerateOnThePage:
    def test_regenerate_keeps_the_first_answer_and_the_switch_goes_back_to_it(self):
        at = send(new_browser(), "Name three DynamoDB limits")
        (first,) = stored(at)
        settle(click(at, f"regen-{first.message_id}"))
        (turn,) = stored(at)
        assert (turn.status, turn.version, turn.versions) == (DONE, 2, 2)
        assert "2 / 2" in [c.value for c in at.caption]
        click(at, f"ver-prev-{turn.message_id}")
        (back,) = stored(at)
        assert (
            back.version == 1
            and back.output_body == first.output_body
            and back.response_end_time == first.response_end_time
        )
        assert "1 / 2" in [c.value for c in at.caption]

    def test_the_newest_question_can_be_edited_and_the_old_one_is_kept(self):
        at = send(new_browser(), "What is a partition key")
        (first,) = stored(at)
        assert edit_popovers(at) == 1
        at.session_state[f"edit-open-{first.message_id}"] = True
        at.run()
        at.text_area(key=f"edit-box-{first.message_id}").set_value("What is a sort key?").run()
        settle(click(at, f"edit-send-{first.message_id}"))
        (turn,) = stored(at)
        assert (turn.input_body, turn.version, turn.status) == ("What is a sort key?", 2, DONE)
        (kept,) = services().store.versions.versions(DEV, turn)
        assert kept.input_body == "What is a partition key" and kept.output_body == first.output_body

    def test_a_question_too_long_to_hold_in_its_item_is_not_cut_by_an_edit_box(self):
        at = send(new_browser(), "Review this: " + "a clause of the contract. " * 1_000)
        (first,) = stored(at)
        assert first.input_ref is not None  # in the object store: the item holds its beginning
        at.session_state[f"edit-open-{first.message_id}"] = True
        at.run()
        assert not [t for t in at.text_area if t.key == f"edit-box-{first.message_id}"]
        assert any("too long to edit here without cutting it" in c.value for c in at.caption)

    def test_every_question_offers_edit_and_an_older_one_sends_in_a_branch(self):
        at = send(new_browser(), "first question")
        send(at, "second question")
        send(at, "third question")
        first, older, newest = stored(at)
        assert edit_popovers(at) == 3
        at.session_state[f"edit-open-{newest.message_id}"] = True
        at.run()
        assert [b.key for b in at.button if b.key and b.key.startswith("edit-")] == [f"edit-send-{newest.message_id}"]
        at.session_state[f"edit-open-{newest.message_id}"] = False
        at.session_state[f"edit-open-{older.message_id}"] = True
        at.run()
        at.text_area(key=f"edit-box-{older.message_id}").set_value("second question, edited").run()
        settle(click(at, f"edit-branch-{older.message_id}"))
        branch_id = open_id(at)
        assert branch_id != first.session_id  # the page opened the branch
        assert [m.input_body for m in stored(at)] == ["first question", "second question, edited"]
        assert any("A branch: the turns before an edited question were copied" in c.value for c in at.caption)
        assert any("Copied from the original chat" in c.value for c in at.chat_message[1].caption)
        click(at, "branch-origin")  # back to the original, at the question the branch was made from
        assert open_id(at) == first.session_id
        assert [m.input_body for m in stored(at)] == ["first question", "second question", "third question"]

    def test_an_empty_edit_of_an_older_question_is_refused_in_place(self):
        at = send(new_browser(), "first question")
        send(at, "second question")
        first, newest = stored(at)
        at.session_state[f"edit-open-{first.message_id}"] = True
        at.run()
        at.text_area(key=f"edit-box-{first.message_id}").set_value("   ").run()
        click(at, f"edit-branch-{first.message_id}")
        assert open_id(at) == first.session_id and any("Type a question" in e.value for e in at.error)
        assert len(services().store.list_sessions(DEV).items) == 1

    def test_a_branch_of_the_first_question_says_nothing_was_copied(self):
        at = send(new_browser(), "first question")
        send(at, "second question")
        first, _ = stored(at)
        at.session_state[f"edit-open-{first.message_id}"] = True
        at.run()
        at.text_area(key=f"edit-box-{first.message_id}").set_value("first question, edited").run()
        settle(click(at, f"edit-branch-{first.message_id}"))
        assert [m.input_body for m in stored(at)] == ["first question, edited"]
        captions = [c.value for c in at.caption]
        assert any("A branch, made from an edited question of the original chat" in c for c in captions)
        assert not any("were copied" in c for c in captions)
