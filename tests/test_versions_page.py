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

    def test_only_the_newest_question_offers_edit(self):
        at = send(new_browser(), "first question")
        send(at, "second question")
        older, newest = stored(at)
        assert edit_popovers(at) == 1  # the newest question's
        at.session_state[f"edit-open-{newest.message_id}"] = True
        at.run()
        assert [t.key for t in at.text_area] == [f"edit-box-{newest.message_id}"]
