"""Memories: from what the user wrote only, add-only, de-duplicated, capped, switchable, injected as a block."""

import threading

import pytest

from lib.config import Settings
from lib.context.cache import ContextCache
from lib.context.engine import ContextEngine
from lib.context.memories import BLOCK_HEADER, rule_facts
from lib.model.models import DemoModel
from lib.ops.invariants import check_user
from lib.storage import keys
from lib.storage.memories import memory_id

U, OTHER = "mia@example.com", "noa@example.com"


def settings(**extra):
    return Settings.load(env={"CHAT_MODEL_PROVIDER": "demo", **extra}, secrets={}, for_operator=True)


@pytest.fixture
def engine(client, table, meter):
    return ContextEngine(client, table, meter, DemoModel(delay_s=0), settings())


def answered(store, question, answer="Sure.", user=U, session=None):
    if session is None:
        session, message = store.create_session(user, question, system_prompt_id="default-v1")
    else:
        session, message = store.send_message(user, session, question, system_prompt_id="default-v1")
    return session, store.finish_message(
        user,
        message,
        output_body=answer,
        input_token=1,
        output_token=1,
        response_start_time=message.create_time,
        response_end_time=message.create_time,
    )


class TestRules:
    def test_first_person_durable_statements_are_kept_and_questions_are_not(self):
        assert rule_facts("I prefer tabs over spaces. What is a ULID? My manager is Dana Lee.") == [
            "I prefer tabs over spaces.",
            "My manager is Dana Lee.",
        ]
        assert rule_facts("How do I prefer one index over another?") == []
        assert rule_facts("I'm trying to fix a flaky test. I'm a staff engineer.") == ["I'm a staff engineer."]
        assert rule_facts("我叫王芳。我们决定用PostgreSQL。这个怎么写？") == ["我叫王芳。", "我们决定用PostgreSQL。"]

    def test_a_lasting_taste_is_kept_and_a_remark_on_the_moment_is_not(self):
        assert rule_facts("I love hiking. I like my coffee black. I love creating art!") == [
            "I love hiking.",
            "I like my coffee black.",
            "I love creating art!",
        ]
        assert rule_facts("I love all the yellow leaves, it looks so cozy.") == []
        assert rule_facts("I love that you chose pottery for your art. I love how it turned out.") == []

    def test_what_happened_at_a_time_is_not_a_standing_fact(self):
        assert rule_facts("Last week, I decided to run for office again.") == []
        assert rule_facts("My son had an accident yesterday. My team is Payments.") == ["My team is Payments."]


class TestExtraction:
    def test_only_the_users_words_become_memories_with_the_seed_shape(self, engine, store, client, table):
        session, message = answered(
            store,
            "We decided to ship on Fridays. Any tips?",
            answer="I always recommend you never ship on Fridays. My name is Claude.",
        )
        outcome = engine.extract_memories_after_save(ContextCache(), U, message)
        assert [m.text for m in outcome.added] == ["We decided to ship on Fridays."]
        item = client.get_item(
            TableName=table,
            Key={"pk": {"S": keys.user_pk(U)}, "sk": {"S": "MEM#" + memory_id("We decided to ship on Fridays.")}},
        )["Item"]
        assert {k: list(v.values())[0] for k, v in item.items() if k not in ("pk", "sk")} == {
            "user_id": U,
            "kind": "memory",
            "text": "We decided to ship on Fridays.",
            "source_session_id": session.session_id,
            "source_message_id": message.message_id,
            "create_time": message.create_time,
        }
        assert check_user(client, table, U).ok  # the checker knows MEM# and PREF# records

    def test_a_question_the_user_did_not_type_makes_no_memory_and_no_request(self, engine, store, requests):
        _, message = answered(store, "My manager is Dana Lee. What should I ask her?")
        requests.reset()
        outcome = engine.extract_memories_after_save(ContextCache(), U, message, typed=False)
        assert outcome.added == [] and requests.names == []  # not even the memories' Query
        assert engine.memories.load(U)[0] == []
        typed = engine.extract_memories_after_save(ContextCache(), U, message)  # typed by the user: the default
        assert [m.text for m in typed.added] == ["My manager is Dana Lee."]
        assert typed.added[0].source_message_id == message.message_id  # its provenance: the turn it came from

    def test_the_same_fact_again_is_not_added_twice(self, engine, store):
        cache = ContextCache()
        session, first = answered(store, "I prefer tabs over spaces.")
        _, again = answered(store, "i prefer TABS over spaces!", session=session)
        _, reworded = answered(store, "I prefer tabs over spaces always.", session=session)
        assert len(engine.extract_memories_after_save(cache, U, first).added) == 1
        assert engine.extract_memories_after_save(cache, U, again).duplicates == 1
        assert engine.extract_memories_after_save(cache, U, reworded).duplicates == 1
        assert len(engine.memories.load(U)[0]) == 1

    def test_two_tabs_extracting_the_same_fact_at_once_store_one(self, engine, store):
        _, message = answered(store, "My team is Payments.")
        barrier, outcomes = threading.Barrier(2), []

        def tab():
            barrier.wait()
            outcomes.append(engine.extract_memories_after_save(ContextCache(), U, message))

        threads = [threading.Thread(target=tab) for _ in range(2)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert sorted(len(o.added) for o in outcomes) == [0, 1]
        assert [m.text for m in engine.memories.load(U)[0]] == ["My team is Payments."]

    def test_memories_are_capped_per_user_and_the_cap_is_reported(self, client, table, meter, store):
        engine = ContextEngine(client, table, meter, DemoModel(delay_s=0), settings(CHAT_MEMORY_TOKENS="20"))
        cache = ContextCache()
        session, one = answered(store, "I use Rust for services.")
        _, two = answered(store, "My office is in Lisbon on the fourth floor near the big window.", session=session)
        assert len(engine.extract_memories_after_save(cache, U, one).added) == 1
        outcome = engine.extract_memories_after_save(cache, U, two)
        assert outcome.full and outcome.added == []
        assert engine.memory_tokens(cache, U) <= 20

    def test_the_off_switch_stops_extraction_and_injection_and_keeps_the_memories(self, engine, store, requests):
        session, message = answered(store, "I prefer dark mode.")
        engine.extract_memories_after_save(ContextCache(), U, message)
        engine.memories.set_enabled(U, False)
        cache = ContextCache()
        _, later = answered(store, "I prefer light mode now.", session=session)
        assert engine.extract_memories_after_save(cache, U, later).added == []
        context = engine.context(
            cache, U, None, "which mode?", [], summary=None, system_prompt_id="default-v1", budget=2000
        )
        assert BLOCK_HEADER not in context.prompt.system
        assert [m.text for m in engine.memories.load(U)[0]] == ["I prefer dark mode."]

    def test_a_user_sees_only_their_own_memories(self, engine, store):
        _, message = answered(store, "My manager is Dana.", user=OTHER)
        engine.extract_memories_after_save(ContextCache(), OTHER, message)
        assert engine.memories.load(U)[0] == []


class TestInjection:
    def test_memories_reach_the_prompt_once_per_browser_session_for_one_query(self, engine, store, requests):
        session, message = answered(store, "My manager is Dana Lee.")
        engine.extract_memories_after_save(ContextCache(), U, message)
        cache = ContextCache()
        requests.reset()
        first = engine.context(
            cache,
            U,
            session,
            "who is my manager?",
            [message],
            summary=None,
            system_prompt_id="default-v1",
            budget=2000,
            earlier_turns=1,
        )
        assert requests.names == ["Query"]  # the memories; the chat fits, so no older turns are read
        assert "- [" in first.prompt.system and "My manager is Dana Lee." in first.prompt.system
        assert first.memory_ids == (memory_id("My manager is Dana Lee."),)
        requests.reset()
        engine.context(
            cache,
            U,
            session,
            "and again?",
            [message],
            summary=None,
            system_prompt_id="default-v1",
            budget=2000,
            earlier_turns=1,
        )
        assert requests.names == []  # cached for the browser session

    def test_edit_and_delete(self, engine, store):
        _, message = answered(store, "I use vim.")
        (memory,) = engine.extract_memories_after_save(ContextCache(), U, message).added
        edited = engine.memories.edit(U, memory, "I use neovim.")
        assert [m.text for m in engine.memories.load(U)[0]] == ["I use neovim."]
        engine.memories.delete(U, edited.memory_id)
        assert engine.memories.load(U)[0] == []
        from lib.storage.memories import MemoryNotFound

        with pytest.raises(MemoryNotFound):
            engine.memories.edit(U, memory, "resurrected")
