"""The engine through the store: the request budget of assembly, recall of old turns, the turn it feeds, caching."""

import pytest

from lib.config import Settings
from lib.context.cache import ContextCache, MemoryState
from lib.context.engine import ContextEngine
from lib.context.semantic_recall import FETCH_MAX
from lib.model.models import DemoModel
from lib.turn.turns import begin_turn

U = "ivy@example.com"


def settings(**extra):
    return Settings.load(env={"CHAT_MODEL_PROVIDER": "demo", **extra}, secrets={}, for_operator=True)


@pytest.fixture
def engine(client, table, meter):
    return ContextEngine(client, table, meter, DemoModel(delay_s=0), settings())


@pytest.fixture
def indexed(client, table, meter):
    """An engine over a table whose turns have vectors (the local embedder): semantic recall finds old turns."""
    from lib.search.embedders import LocalEmbedder
    from lib.search.indexer import Indexer
    from lib.storage.gateway import Gateway

    LocalEmbedder._load()
    indexer = Indexer(Gateway(client, table, meter), LocalEmbedder())
    return ContextEngine(client, table, meter, DemoModel(delay_s=0), settings(), indexer=indexer)


def long_chat(store, n, engine=None):
    """n answered turns, the third about port 5433; each indexed when `engine` has an indexer."""
    from lib.search.indexer import index_turn_after_save

    session, turns = None, []
    for i in range(n):
        q = "Our staging database listens on port 5433." if i == 2 else f"Question {i} about the weather in May."
        if session is None:
            session, m = store.create_session(U, q, system_prompt_id="default-v1")
        else:
            session, m = store.send_message(U, session, q, system_prompt_id="default-v1")
        turns.append(
            store.finish_message(
                U,
                m,
                output_body=f"Answer {i}: " + "sunny and warm " * 40,
                input_token=1,
                output_token=1,
                response_start_time=m.create_time,
                response_end_time=m.create_time,
            )
        )
        if engine is not None:
            index_turn_after_save(engine.indexer, U, session.title, turns[-1])
    return session, turns


class TestRequestBudget:
    def test_without_the_vector_index_recall_reads_nothing_beyond_the_loaded_page(self, engine, store, requests):
        session, _ = long_chat(store, 45)
        view = store.open_session(U, session.session_id)
        cache = ContextCache()
        requests.reset()
        context = engine.context(
            cache,
            U,
            view.session,
            "which port does the staging database use?",
            view.messages,
            summary=view.summary,
            system_prompt_id="default-v1",
            budget=2000,
            earlier_turns=45,
        )
        assert requests.names == ["Query"]  # memories, once per browser session; never the chat's history
        assert "5433" not in context.prompt.system  # turn 3 is beyond the loaded page and no index finds it
        assert "not sent (not loaded or recalled)" in context.note

    def test_with_the_index_a_long_chat_costs_one_search_and_one_read_of_the_hits(self, indexed, store, requests):
        engine = indexed
        session, _ = long_chat(store, 45, engine)
        view = store.open_session(U, session.session_id)
        cache = ContextCache()

        def ask(question):
            requests.reset()
            context = engine.context(
                cache,
                U,
                view.session,
                question,
                view.messages,
                summary=view.summary,
                system_prompt_id="default-v1",
                budget=2000,
                earlier_turns=45,
            )
            return context, requests.names[:]

        context, names = ask("which port does the staging database use?")
        assert names == ["Query", "SearchVectors", "BatchGetItem"]  # memories once; the index; its best hits
        assert "5433" in context.prompt.system  # recalled from beyond the loaded page
        (read,) = [params for name, params in requests.calls if name == "BatchGetItem"]
        asked = next(iter(read["RequestItems"].values()))["Keys"]
        assert 0 < len(asked) < 45  # the hits the room can take, not the chat
        assert len(asked) == FETCH_MAX  # these turns are longer than their snippets: the best 8 are read
        cut = [s for s in context.sources if s.kind == "recalled" and s.excerpt]
        assert len([s for s in context.sources if s.kind == "recalled"]) > FETCH_MAX and cut  # the rest: snippets
        context, names = ask("the staging database port again?")
        (read,) = [params for name, params in requests.calls if name == "BatchGetItem"]  # more hits than 8 remain
        again = {k["sk"]["S"] for k in next(iter(read["RequestItems"].values()))["Keys"]}
        assert again and "5433" in context.prompt.system
        assert not again & {k["sk"]["S"] for k in asked}  # only the hits not held yet: nothing read twice

    def test_what_is_read_is_sized_by_the_budget_and_never_by_the_chats_length(self, indexed, store, requests):
        engine = indexed
        session, _ = long_chat(store, 80, engine)
        view = store.open_session(U, session.session_id)

        def keys_read(budget, question="which port does the staging database use?"):
            cache = ContextCache()
            cache.memory[U] = MemoryState([], True)
            requests.reset()
            context = engine.context(
                cache,
                U,
                view.session,
                question,
                view.messages,
                summary=view.summary,
                system_prompt_id="default-v1",
                budget=budget,
                earlier_turns=80,
            )
            assert requests.names == ["SearchVectors", "BatchGetItem"] and context.tokens <= budget
            (read,) = [params for name, params in requests.calls if name == "BatchGetItem"]
            return len(next(iter(read["RequestItems"].values()))["Keys"]), context

        small, context = keys_read(1000)
        large, more = keys_read(4000)
        assert small == large == FETCH_MAX  # at most 8 turns read (4 RRU) at any budget, of 80
        sent = [len([s for s in c.sources if s.kind == "recalled"]) for c in (context, more)]
        assert 0 < sent[0] < sent[1] <= 60  # what 1,000 and 4,000 tokens can take: the rest from the snippets
        assert "5433" in context.prompt.system

    def test_a_new_chats_first_question_and_a_chat_that_fits_search_nothing(self, indexed, store, requests):
        engine = indexed
        cache = ContextCache()
        cache.memory[U] = MemoryState([], True)
        session, _ = store.create_session(U, "hello there", system_prompt_id="default-v1")
        requests.reset()
        engine.context(cache, U, session, "hello there", [], summary=None, system_prompt_id="default-v1", budget=2000)
        assert requests.names == []  # nothing earlier: no SearchVectors
        session, _ = long_chat(store, 5, engine)
        view = store.open_session(U, session.session_id)
        requests.reset()
        context = engine.context(
            cache, U, view.session, "port?", view.messages, summary=None, system_prompt_id="default-v1", budget=2000
        )
        assert requests.names == [] and context.turns_included == 5  # all loaded, all fit: sent word for word

    def test_a_chat_that_fits_the_loaded_page_reads_no_older_turns(self, engine, store, requests):
        session, _ = long_chat(store, 5)
        view = store.open_session(U, session.session_id)
        cache = ContextCache()
        cache.memory[U] = MemoryState([], True)  # this browser session read them with an earlier question
        requests.reset()
        engine.context(
            cache,
            U,
            view.session,
            "port?",
            view.messages,
            summary=None,
            system_prompt_id="default-v1",
            budget=2000,
            earlier_turns=5,
        )
        assert requests.names == []


class TestTurn:
    def test_begin_turn_with_the_engine_sends_the_loaders_prompt_after_one_transaction(self, indexed, store, requests):
        engine = indexed
        session, _ = long_chat(store, 25, engine)
        view = store.open_session(U, session.session_id)
        cache = ContextCache()
        requests.reset()
        turn = begin_turn(
            store,
            DemoModel(delay_s=0),
            U,
            view.session,
            "what port was staging on?",
            view.messages,
            system_prompt_id="default-v1",
            budget_tokens=1500,
            engine=engine,
            cache=cache,
            summary=view.summary,
        )
        # the question first, then memories (once per browser session), the index and its best hits
        assert requests.names == ["TransactWriteItems", "Query", "SearchVectors", "BatchGetItem"]
        assert turn.context.tokens <= 1500 and "5433" in turn.context.prompt.system
        assert turn.context.note.startswith("The model saw the newest")
        "".join(turn)
        saved = turn.close()
        assert saved.status == "done"

    def test_a_retry_sees_only_the_turns_before_it(self, indexed, store):
        from lib.turn.turns import retry_turn

        engine = indexed
        session, turns = long_chat(store, 24, engine)
        session, pending = store.send_message(U, session, "which port does staging use?", system_prompt_id="p")
        failed = store.fail_message(U, pending, output_body="", error="overloaded")
        session, later = store.send_message(U, session, "Later: staging moved to port 7000.", system_prompt_id="p")
        later = store.finish_message(
            U,
            later,
            output_body="ok, port 7000",
            input_token=1,
            output_token=1,
            response_start_time=later.create_time,
            response_end_time=later.create_time,
        )
        view = store.open_session(U, session.session_id)
        turn = retry_turn(
            store,
            DemoModel(delay_s=0),
            U,
            view.session,
            failed,
            view.messages,
            budget_tokens=2000,
            engine=engine,
            cache=ContextCache(),
            summary=view.summary,
        )
        sent = [s.id for s in turn.context.sources if s.kind in ("turn", "recalled")]
        assert later.message_id not in sent and "7000" not in turn.context.prompt.system
        assert "5433" in turn.context.prompt.system
        assert turn.context.prompt.messages[-1]["content"] == "which port does staging use?"

    def test_without_an_engine_the_turn_sends_the_loaded_turns_only(self, store, requests):
        session, _ = long_chat(store, 3)
        view = store.open_session(U, session.session_id)
        requests.reset()
        turn = begin_turn(
            store,
            DemoModel(delay_s=0),
            U,
            view.session,
            "hi",
            view.messages,
            system_prompt_id="default-v1",
            budget_tokens=24000,
        )
        assert requests.names == ["TransactWriteItems"] and turn.context.turns_included == 3


class TestPromptCaching:
    def test_claude_gets_cache_control_on_the_stable_prefix_and_cache_tokens_are_kept(
        self, fake_model, store, client, table, meter
    ):
        from lib.services import make_model

        s = Settings.load(secrets={}, for_operator=True)
        model = make_model(s)
        engine = ContextEngine(client, table, meter, model, s)
        session, turns = long_chat(store, 3)
        engine.memories.add(U, "I prefer short answers.", session_id=None, message_id=None)
        cache = ContextCache()
        context = engine.context(
            cache,
            U,
            session,
            "and tomorrow?",
            turns,
            summary=None,
            system_prompt_id="default-v1",
            budget=4000,
            earlier_turns=3,
        )
        reply = model.stream(context.prompt)
        "".join(reply)
        body = fake_model.requests[-1]["body"]
        assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
        assert body["system"][0]["text"] == context.prompt.cache_prefix
        assert "I prefer short answers." in body["system"][0]["text"]
        assert [m["content"] for m in body["messages"]][-1] == "and tomorrow?"

    def test_the_demo_model_takes_the_same_prompt(self, engine, store):
        engine.memories.add(U, "I prefer short answers.", session_id=None, message_id=None)
        context = engine.context(
            ContextCache(), U, None, "hello", [], summary=None, system_prompt_id="default-v1", budget=1000
        )
        assert context.prompt.cache_prefix
        assert "demo model" in "".join(DemoModel(delay_s=0).stream(context.prompt))
