"""Custom instructions: written by the user on the Memory page, read with the memories in the same Query, sent in
every chat's system text and listed as their own part of what the model saw, capped, and purged with the user."""

import pytest

from lib.context.cache import ContextCache
from lib.errors import InvalidInstructions
from lib.storage.memories import MemoryStore
from lib.storage.records import INSTRUCTIONS_MAX_CHARS, Instructions

U = "ina@example.com"


@pytest.fixture
def memories(client, table, meter):
    return MemoryStore(client, table, meter)


class TestStored:
    def test_saved_instructions_come_back_with_the_memories_in_one_query(self, memories, requests):
        memories.add(U, "I prefer short answers.", session_id=None, message_id=None)
        saved = memories.set_instructions(U, "  I work in payments.  ", "Answer in German.")
        requests.reset()
        found, enabled, instructions = memories.load_all(U)
        assert requests.names == ["Query"] and enabled and [m.text for m in found] == ["I prefer short answers."]
        assert (
            (instructions.about, instructions.style)
            == ("I work in payments.", "Answer in German.")
            == (
                saved.about,
                saved.style,
            )
        )

    def test_over_the_cap_is_refused_and_nothing_is_written(self, memories, requests):
        requests.reset()
        with pytest.raises(InvalidInstructions, match=f"{INSTRUCTIONS_MAX_CHARS:,}"):
            memories.set_instructions(U, "x" * (INSTRUCTIONS_MAX_CHARS + 1), "")
        assert requests.names == [] and memories.load_all(U)[2].empty

    def test_clearing_both_deletes_the_record(self, memories, client, table):
        from lib.storage import keys
        from lib.storage.gateway import to_item

        memories.set_instructions(U, "I work in payments.", "")
        assert memories.set_instructions(U, "", "  ").empty
        key = to_item(keys.preference_key(U, "instructions"))
        assert "Item" not in client.get_item(TableName=table, Key=key, ConsistentRead=True)


class TestSent:
    def test_they_join_the_system_text_as_their_own_part_at_no_extra_request(self, client, table, meter, requests):
        from lib.config import Settings
        from lib.context.engine import ContextEngine
        from lib.model.models import DemoModel

        s = Settings.load(env={"CHAT_MODEL_PROVIDER": "demo"}, secrets={}, for_operator=True)
        engine = ContextEngine(client, table, meter, DemoModel(delay_s=0), s)
        engine.memories.set_instructions(U, "I work in payments.", "Answer in German.")
        requests.reset()
        context = engine.context(
            ContextCache(),
            U,
            None,
            "How do refunds work?",
            [],
            summary=None,
            system_prompt_id="default-v1",
            budget=2000,
        )
        assert requests.names == ["Query"]  # the memories' Query brings them
        assert "About the user: I work in payments." in context.prompt.system
        assert "How to answer: Answer in German." in context.prompt.system
        kinds = [(p.kind, p.tokens) for p in context.sources]
        assert kinds[1][0] == "instructions" and kinds[1][1] > 5
        assert abs(sum(p.tokens for p in context.sources) - context.tokens) <= 2  # the parts add up to the whole

    def test_no_instructions_no_part(self, client, table, meter):
        from lib.config import Settings
        from lib.context.engine import ContextEngine
        from lib.model.models import DemoModel

        s = Settings.load(env={"CHAT_MODEL_PROVIDER": "demo"}, secrets={}, for_operator=True)
        engine = ContextEngine(client, table, meter, DemoModel(delay_s=0), s)
        context = engine.context(
            ContextCache(), U, None, "hi", [], summary=None, system_prompt_id="default-v1", budget=2000
        )
        assert [p.kind for p in context.sources] == ["system", "question"]


def test_the_memory_page_saves_them_and_the_next_question_uses_them(app_env):
    from tests.pages import DEV, new_browser, send, services
    from tests.test_memory_page import memory_page

    at = memory_page()
    (about,) = [t for t in at.text_area if t.label == "About you"]
    (style,) = [t for t in at.text_area if t.label == "How to answer"]
    about.set_value("I work in the payments team.")
    style.set_value("Answer in German.")
    (save,) = [b for b in at.button if b.label == "Save instructions"]
    save.click().run()
    assert not at.exception, at.exception
    assert services().engine.memories.load_all(DEV)[2] == Instructions(
        "I work in the payments team.", "Answer in German.", services().engine.memories.load_all(DEV)[2].update_time
    )
    chat = send(new_browser(), "What should I read first?")
    session_id = chat.query_params["session"]
    session_id = session_id[0] if isinstance(session_id, list) else session_id
    (turn,) = services().store.open_session(DEV, session_id).messages
    assert "instructions" in [part["kind"] for part in turn.context]


def test_a_purge_removes_them(store, client, table, memories):
    from lib.ops.users import purge_user
    from lib.storage.operator import Operator

    store.create_session(U, "hello", system_prompt_id="p")
    memories.set_instructions(U, "I work in payments.", "")
    purge_user(Operator(client, table), U, dry_run=False)
    assert memories.load_all(U)[2].empty
