"""The Memory page through AppTest: list, edit, delete, the off switch; only the signed-in user's memories."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from lib.config import Settings
from lib.web import ui
from tests.pages import HANG_S

APP = str(Path(__file__).resolve().parents[1] / "app.py")
DEV = "dev@localhost"


@pytest.fixture
def engine(app_env):
    svc = ui._services(Settings.load())
    return svc.engine


def svc_item(user, memory):
    """The memory's item as stored (to see its vector)."""
    from lib.storage import keys
    from lib.storage.gateway import from_item, to_item

    svc = ui._services(Settings.load())
    return from_item(
        svc.database.client.get_item(
            TableName=svc.database.table, ConsistentRead=True, Key=to_item(keys.memory_key(user, memory.memory_id))
        )["Item"]
    )


def memory_page() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=HANG_S)
    at.run()
    at.switch_page("pages/memory.py").run()
    assert not at.exception, at.exception
    return at


def shown(at):
    return [m.value for m in at.markdown if m.value.startswith(("I ", "My ", "We "))]


class TestMemoryPage:
    def test_an_empty_memory_says_how_memories_come(self, engine):
        at = memory_page()
        assert "No memories yet" in at.info[0].value
        assert "0 memories · 0 of 2,000 tokens" in [c.value for c in at.caption]
        assert "rule-based, offline" in at.caption[0].value

    def test_lists_newest_first_and_only_the_signed_in_users(self, engine):
        engine.memories.add(DEV, "I prefer tabs.", session_id=None, message_id=None, at="2026-11-01T00:00:00.000Z")
        engine.memories.add(
            DEV, "My team is Payments.", session_id=None, message_id=None, at="2026-11-02T00:00:00.000Z"
        )
        engine.memories.add("someone@else.com", "My salary is secret.", session_id=None, message_id=None)
        at = memory_page()
        assert shown(at) == ["My team is Payments.", "I prefer tabs."]

    def test_edit_and_delete_change_the_stored_memories(self, engine):
        engine.memories.add(DEV, "I use vim.", session_id=None, message_id=None)
        engine.memories.add(
            DEV, "My team is Payments.", session_id=None, message_id=None, at="2000-01-01T00:00:00.000Z"
        )
        at = memory_page()
        (area,) = [t for t in at.text_area if t.value == "I use vim."]
        area.set_value("I use neovim.")
        [b for b in at.button if b.key == f"save-{area.key.removeprefix('text-')}"][0].click().run()
        assert not at.exception, at.exception
        assert sorted(m.text for m in engine.memories.load(DEV)[0]) == ["I use neovim.", "My team is Payments."]
        assert engine.indexer is not None
        stored = svc_item(DEV, [m for m in engine.memories.load(DEV)[0] if m.text == "I use neovim."][0])
        assert "embedding" in stored  # the edit removed the old vector; the page embedded the new text
        delete = [b for b in at.button if b.label == "Delete"]
        delete[-1].click().run()  # the oldest, shown last
        assert not at.exception
        assert [m.text for m in engine.memories.load(DEV)[0]] == ["I use neovim."]
        assert shown(at) == ["I use neovim."]

    def test_an_empty_edit_is_refused_with_a_sentence(self, engine):
        engine.memories.add(DEV, "I use vim.", session_id=None, message_id=None)
        at = memory_page()
        [t for t in at.text_area if t.value == "I use vim."][0].set_value("   ")
        [b for b in at.button if b.label == "Save"][0].click().run()
        assert not at.exception and "cannot be empty" in at.error[0].value
        assert [m.text for m in engine.memories.load(DEV)[0]] == ["I use vim."]

    def test_the_off_switch_is_stored_and_shown(self, engine):
        at = memory_page()
        assert at.toggle[0].value is True
        at.toggle[0].set_value(False).run()
        assert not at.exception
        assert engine.memories.load(DEV)[1] is False
        assert any("**off**" in c.value for c in at.caption)
