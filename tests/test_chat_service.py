"""The chat service (lib/turn/chat.py) on its own, no page: a turn's life from the commit to the post-save work,
what the worker may and may not touch, the hot-tier counter after every write, and failures named truly."""

from __future__ import annotations

import dataclasses
import json
import threading

import pytest

from lib.config import Settings
from lib.context.cache import ContextCache, MemoryState
from lib.context.engine import ContextEngine
from lib.errors import ChatBusy, ChatError, EmptyQuestion, GenerationLimit, MessageNotPending
from lib.hot.tier import HotTier
from lib.model.models import DemoModel, ModelError, Reply
from lib.storage.records import DONE, FAILED, PENDING
from lib.turn.chat import ChatService
from lib.turn.live import LiveAnswer
from lib.turn.worker import CRASHED, Generations, quietly
from lib.web.chat_view import ChatView
from tests.redis_server import redis_server  # noqa: F401 (the fixture)

U = "kim@example.com"


def settings(**extra):
    return Settings.load(env={"CHAT_MODEL_PROVIDER": "demo", **extra}, secrets={}, for_operator=True)


def service(client, table, meter, store, *, hot=None, model=None, **extra) -> ChatService:
    s = settings(**extra)
    model = model or DemoModel(delay_s=0)
    engine = ContextEngine(client, table, meter, model, s)
    return ChatService(s, store, model, None, engine, Generations(per_user=2, hot=hot))


@pytest.fixture
def chat(client, table, meter, store):
    return service(client, table, meter, store)


def done(chat: ChatService, sent) -> LiveAnswer:
    assert sent.live.wait(300), "the worker did not finish"
    return sent.live


class TestATurn:
    def test_the_question_is_committed_before_the_answer_and_the_worker_saves_it(self, chat, store, requests):
        sent = chat.ask(U, None, "How do ULIDs sort?", history=[], summary=None, cache=ContextCache())
        assert requests.names[0] == "TransactWriteItems"  # the commit comes first
        assert sent.first and sent.message.status == PENDING
        assert sent.version == chat.version(U, sent.session.session_id)  # this process's own change counter
        live = done(chat, sent)
        stored = store.open_session(U, sent.session.session_id).messages
        assert [m.status for m in stored] == [DONE] and stored[0].output_body == live.saved.output_body
        assert live.renamed is not None and store.get_session(U, sent.session.session_id).title == live.renamed.title

    def test_a_follow_up_continues_the_same_chat_and_gets_no_new_title(self, chat, store):
        first = done(chat, chat.ask(U, None, "hello", history=[], summary=None, cache=ContextCache()))
        view = store.open_session(U, first.session_id)
        sent = chat.ask(U, view.session, "and then?", history=view.messages, summary=None, cache=ContextCache())
        live = done(chat, sent)
        assert not sent.first and live.renamed is None
        assert [m.status for m in store.open_session(U, first.session_id).messages] == [DONE, DONE]

    def test_an_empty_question_commits_nothing(self, chat, store, requests):
        with pytest.raises(EmptyQuestion):
            chat.ask(U, None, "  \n ", history=[], summary=None, cache=ContextCache())
        assert requests.names == [] and store.list_sessions(U).items == []

    def test_a_question_over_the_cap_commits_nothing(self, client, table, meter, store):
        slow = service(client, table, meter, store, model=DemoModel(delay_s=0.5))
        sents = [slow.ask(U, None, f"question {i}", history=[], summary=None, cache=ContextCache()) for i in range(2)]
        with pytest.raises(GenerationLimit):
            slow.ask(U, None, "one too many", history=[], summary=None, cache=ContextCache())
        for sent in sents:
            slow.stop(sent.message.message_id)
            done(slow, sent)
        assert len(store.list_sessions(U).items) == 2

    def test_retry_answers_the_same_question_in_place(self, client, table, meter, store):
        chat = service(client, table, meter, store, model=Failing(after=3))
        failed = done(chat, chat.ask(U, None, "tell me", history=[], summary=None, cache=ContextCache()))
        assert failed.saved.status == FAILED
        view = store.open_session(U, failed.session_id)
        chat.model.after = None
        again = done(
            chat,
            chat.retry(U, view.session, view.messages[0], history=view.messages, summary=None, cache=ContextCache()),
        )
        (turn,) = store.open_session(U, failed.session_id).messages
        assert again.message_id == turn.message_id and turn.status == DONE


class Failing(DemoModel):
    """The demo model, failing after `after` chunks (None: never)."""

    def __init__(self, after):
        super().__init__(delay_s=0)
        self.after = after

    def stream(self, prompt):
        reply = super().stream(prompt)
        if self.after is None:
            return reply
        after = self.after

        def broken():
            for i, chunk in enumerate(reply):
                if i == after:
                    raise ModelError("The model is overloaded right now. Press Retry in a moment.")
                yield chunk

        return Reply(self.name, broken())


class TestTheSearchVectorFollowsTheShownVersion:
    def test_a_new_version_that_fails_takes_the_turns_vector_out_of_the_index(self, client, table, meter, store):
        """Recall sends a hit from its snippet without reading the turn: a vector of the old version must not stay
        behind a turn whose shown version failed."""
        from lib.search.embedders import LocalEmbedder
        from lib.search.indexer import Indexer
        from lib.storage import keys
        from lib.storage.gateway import Gateway, to_item

        LocalEmbedder._load()
        model = Failing(None)
        s = settings()
        indexer = Indexer(Gateway(client, table, meter), LocalEmbedder())
        engine = ContextEngine(client, table, meter, model, s, indexer=indexer)
        chat = ChatService(s, store, model, None, engine, Generations(per_user=2))
        first = done(chat, chat.ask(U, None, "Where is staging?", history=[], summary=None, cache=ContextCache()))

        def vector_item():
            key = to_item(keys.vector_key(U, first.session_id, first.message_id))
            return client.get_item(TableName=table, Key=key, ConsistentRead=True).get("Item")

        assert vector_item() is not None  # the answered turn is searchable
        view = store.open_session(U, first.session_id)
        model.after = 0  # the new version fails before its first chunk
        again = chat.regenerate(
            U, view.session, view.messages[0], history=view.messages, summary=None, cache=ContextCache()
        )
        assert done(chat, again).saved.status == FAILED
        assert vector_item() is None  # its snippet was the first version's


class TestTheWorkerOwnsNothingOfThePage:
    def test_memories_found_after_the_save_are_published_and_the_pages_cache_is_left_alone(self, chat):
        cache = ContextCache()
        cache.memory[U] = MemoryState([], True)  # this browser session read the memories with an earlier question
        known = cache.memory[U]
        live = done(
            chat,
            chat.ask(U, None, "I prefer answers in German. What is DynamoDB?", history=[], summary=None, cache=cache),
        )
        assert cache.memory[U] is known and known.memories == []  # the worker never touched the page's state
        assert [m.text for m in live.memories_added] == ["I prefer answers in German."]
        cache.learn_memories(U, live.memories_added)  # what the page does in its own run
        assert [m.text for m in cache.memory[U].memories] == ["I prefer answers in German."]
        assert known.memories == []  # a new list: a reader iterating the old one is not disturbed

    def test_the_handoff_is_a_snapshot_the_page_can_change_after(self, chat, store):
        first = done(chat, chat.ask(U, None, "hello", history=[], summary=None, cache=ContextCache()))
        view = store.open_session(U, first.session_id)
        history = list(view.messages)
        sent = chat.ask(U, view.session, "more", history=history, summary=None, cache=ContextCache())
        history.clear()  # the page moved on (another chat, a reload) while the worker runs
        assert done(chat, sent).saved.status == DONE


class TestFailuresAreNamedTruly:
    def test_a_bug_in_our_own_stream_code_is_not_blamed_on_the_connection(self):
        def source():
            yield "half"
            raise TypeError("a bug of ours")

        reply = Reply("m", source())
        with pytest.raises(TypeError):
            list(reply)

    def test_a_turn_whose_stream_code_crashes_is_saved_failed_because_of_the_app(
        self, client, table, meter, store, capsys
    ):
        class Buggy(DemoModel):
            def stream(self, prompt):
                def source():
                    yield "Some text"
                    raise KeyError("secret question text")

                return Reply(self.name, source())

        chat = service(client, table, meter, store, model=Buggy(delay_s=0))
        live = done(chat, chat.ask(U, None, "secret question text", history=[], summary=None, cache=ContextCache()))
        assert live.saved.status == FAILED and live.saved.error == CRASHED
        err = capsys.readouterr().err
        (line,) = [json.loads(x) for x in err.splitlines() if '"generation_crashed"' in x]
        assert line["level"] == "error" and line["error_class"] == "KeyError"
        assert any("test_chat_service.py" in frame for frame in line["where"])
        assert "secret question text" not in err

    def test_a_bug_in_post_save_work_is_an_error_with_where_it_happened_and_no_message(self, capsys):
        assert quietly("summary", lambda: {}["the user's words"]) is None
        (line,) = [json.loads(x) for x in capsys.readouterr().err.splitlines() if "post_save" in x]
        assert (line["event"], line["level"], line["step"], line["error_class"]) == (
            "post_save_crashed",
            "error",
            "summary",
            "KeyError",
        )
        assert any("test_chat_service.py" in frame and "<lambda>" in frame for frame in line["where"])
        assert "the user's words" not in json.dumps(line)

    def test_the_model_or_dynamodb_refusing_post_save_work_is_a_warning(self, capsys):
        def refused():
            raise ChatError("busy")

        assert quietly("memories", refused) is None
        (line,) = [json.loads(x) for x in capsys.readouterr().err.splitlines() if "post_save" in x]
        assert (line["event"], line["level"], line["error_class"]) == ("post_save_failed", "warning", "ChatError")


class TestEveryWriteMovesTheChatsCounter:
    """With the hot tier, a tab or replica serves a chat's first page from Redis while the counter has not
    moved: every write must move it, or others keep seeing the chat as it was."""

    @pytest.fixture
    def hot(self, redis_server):
        return HotTier.connect(redis_server.url, prefix="chat:test-service:", ttl_s=300)

    def summarised_chat(self, client, table, meter, store, hot):
        """Two turns with a summary (one verbatim turn, a summary every turn), saved by the worker."""
        chat = service(client, table, meter, store, hot=hot, CHAT_VERBATIM_TURNS="1", CHAT_SUMMARY_EVERY="1")
        first = done(
            chat, chat.ask(U, None, "Our staging port is 5433.", history=[], summary=None, cache=ContextCache())
        )
        view = store.open_session(U, first.session_id)
        second = done(
            chat,
            chat.ask(U, view.session, "And production?", history=view.messages, summary=None, cache=ContextCache()),
        )
        return chat, second

    def test_the_workers_summary_moves_the_counter_after_it_is_written(self, client, table, meter, store, hot):
        chat, live = self.summarised_chat(client, table, meter, store, hot)
        assert live.summary is not None and live.summary_version is not None
        assert hot.version(U, live.session_id) == live.summary_version == live.hot_version + 1
        # A tab that read the chat between the save and the summary cached a first page without the summary:
        stale = store.open_session(U, live.session_id)
        hot.cache_view(U, live.session_id, dataclasses.replace(stale, summary=None), live.hot_version)
        tab = ChatView(U)
        tab.navigate(store, live.session_id, hot)
        assert tab.summary is not None and tab.summary.version == live.summary.version

    def test_regenerate_summary_moves_the_counter(self, client, table, meter, store, hot):
        chat, live = self.summarised_chat(client, table, meter, store, hot)
        tab = ChatView(U)
        tab.navigate(store, live.session_id, hot)  # caches the first page at the current counter
        written = chat.regenerate_summary(U, live.session_id, tab.summary)
        assert written.value.written and written.version == hot.version(U, live.session_id)
        other = ChatView(U)
        other.navigate(store, live.session_id, hot)
        assert other.summary.version == written.value.summary.version  # not the cached page's older summary

    def test_rename_and_feedback_move_the_counter(self, client, table, meter, store, hot):
        chat = service(client, table, meter, store, hot=hot)
        live = done(chat, chat.ask(U, None, "hello", history=[], summary=None, cache=ContextCache()))
        before = hot.version(U, live.session_id)
        renamed = chat.rename(U, store.get_session(U, live.session_id), "Greetings")
        rated = chat.set_feedback(U, live.saved, 1)
        assert (renamed.version, rated.version) == (before + 1, before + 2)


class TestOneAnswerAtATime:
    """The caps and 'one answer per chat' hold under concurrency: checked and reserved in one step, before the
    question is committed, whichever tab (thread) or replica asks."""

    def slow(self, client, table, meter, store, **kw):
        # Half a second a chunk: an answer outlasts any step of a test on a loaded machine (each is stopped).
        return service(client, table, meter, store, model=DemoModel(delay_s=0.5), **kw)

    def finish_all(self, chat, sents):
        for sent in sents:
            chat.stop(sent.message.message_id)
            done(chat, sent)

    def race(self, n, work):
        """Run `work(i)` in n threads released together; returns (results, errors)."""
        barrier, results, errors = threading.Barrier(n), [], []

        def run(i):
            barrier.wait()
            try:
                results.append(work(i))
            except ChatError as exc:
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results, errors

    def test_ten_tabs_sending_at_once_get_no_more_answers_than_the_cap(self, client, table, meter, store):
        chat = self.slow(client, table, meter, store)  # per_user=2
        sents, errors = self.race(
            10, lambda i: chat.ask(U, None, f"question {i}", history=[], summary=None, cache=ContextCache())
        )
        assert len(sents) == 2 and len(errors) == 8 and all(isinstance(e, GenerationLimit) for e in errors)
        assert len(store.list_sessions(U).items) == 2  # a refused question committed nothing
        self.finish_all(chat, sents)

    def test_a_second_question_in_a_chat_whose_answer_is_coming_is_refused_and_commits_nothing(
        self, client, table, meter, store
    ):
        chat = self.slow(client, table, meter, store)
        first = chat.ask(U, None, "a long answer please", history=[], summary=None, cache=ContextCache())
        stale = store.get_session(U, first.session.session_id)  # another tab, same chat
        with pytest.raises(ChatBusy):
            chat.ask(U, stale, "meanwhile", history=[], summary=None, cache=ContextCache())
        self.finish_all(chat, [first])
        assert [m.input_body for m in store.open_session(U, first.session.session_id).messages] == [
            "a long answer please"
        ]

    def test_ten_tabs_retrying_one_turn_start_one_answer(self, client, table, meter, store):
        chat = service(client, table, meter, store, model=Failing(after=3), CHAT_MAX_GENERATIONS_PER_USER="20")
        chat.generations.per_user = 20
        failed = done(chat, chat.ask(U, None, "tell me", history=[], summary=None, cache=ContextCache()))
        view = store.open_session(U, failed.session_id)
        chat.model.after, chat.model._delay = None, 0.05
        sents, errors = self.race(
            10,
            lambda i: chat.retry(
                U, view.session, view.messages[0], history=view.messages, summary=None, cache=ContextCache()
            ),
        )
        assert len(sents) == 1 and len(errors) == 9
        assert all(isinstance(e, (ChatBusy, MessageNotPending)) for e in errors)
        done(chat, sents[0])
        (turn,) = store.open_session(U, failed.session_id).messages
        assert turn.status == DONE

    def test_a_retry_from_a_tab_that_missed_another_tabs_retry_is_refused(self, store):
        session, pending = store.create_session(U, "q", system_prompt_id="default-v1")
        failed = store.fail_message(U, pending, output_body="", error="x")
        store.restart_message(U, failed)  # tab 1
        with pytest.raises(MessageNotPending, match="already being written again"):
            store.restart_message(U, failed)  # tab 2 holds the turn as it was before tab 1's Retry

    def test_a_question_sent_between_the_last_words_and_the_save_waits_for_the_save(self, client, table, meter, store):
        chat = service(client, table, meter, store)
        chat.generations.settle_s = 300  # a bound on a hang only: the save lands when the gate opens
        gate, saving = threading.Event(), threading.Event()

        def hold_the_save(model, **_):  # the worker's finish waits here: its stream has ended, not its save
            if model.name == "UpdateItem" and not gate.is_set():
                saving.set()
                gate.wait(300)

        client.meta.events.register("before-call.dynamodb", hold_the_save)
        try:
            first = chat.ask(U, None, "hello", history=[], summary=None, cache=ContextCache())
            assert saving.wait(300)
            threading.Timer(0.2, gate.set).start()
            view = store.get_session(U, first.session.session_id)
            second = chat.ask(U, view, "and now?", history=[first.message], summary=None, cache=ContextCache())
        finally:
            gate.set()
            client.meta.events.unregister("before-call.dynamodb", hold_the_save)
        assert second.waited and first.live.saved is not None
        done(chat, second)
        assert [m.status for m in store.open_session(U, first.session.session_id).messages] == [DONE, DONE]


@pytest.fixture
def replicas(client, table, meter, store, redis_server):
    """Two app processes (each its own worker registry and Redis client) on one table and one Redis."""

    def replica():
        hot = HotTier.connect(redis_server.url, prefix="chat:test-claims:", ttl_s=300)
        return service(client, table, meter, store, hot=hot, model=DemoModel(delay_s=0.5))

    return replica(), replica()


class TestOneAnswerAcrossReplicas:
    def test_another_replica_cannot_start_a_second_answer_in_a_chat_being_answered(self, replicas, store):
        a, b = replicas
        first = a.ask(U, None, "a long answer please", history=[], summary=None, cache=ContextCache())
        stale = store.get_session(U, first.session.session_id)
        with pytest.raises(ChatBusy):
            b.ask(U, stale, "from the other replica", history=[], summary=None, cache=ContextCache())
        a.stop(first.message.message_id)
        done(a, first)
        view = store.open_session(U, first.session.session_id)  # once it is saved, the chat is free again
        later = b.ask(U, view.session, "now?", history=view.messages, summary=None, cache=ContextCache())
        b.stop(later.message.message_id)
        done(b, later)

    def test_the_per_user_cap_counts_every_replica(self, replicas):
        a, b = replicas  # per_user=2 each
        sents = [
            a.ask(U, None, "one", history=[], summary=None, cache=ContextCache()),
            b.ask(U, None, "two", history=[], summary=None, cache=ContextCache()),
        ]
        with pytest.raises(GenerationLimit):
            a.ask(U, None, "three", history=[], summary=None, cache=ContextCache())
        for chat, sent in zip((a, b), sents):
            chat.stop(sent.message.message_id)
            done(chat, sent)

    def test_the_chat_is_free_for_other_replicas_once_its_answer_is_saved_not_after_the_post_save_work(
        self, replicas, store
    ):
        a, b = replicas
        a.model._delay = 0
        working, release = threading.Event(), threading.Event()

        def slow_summary(*args, **kwargs):  # the post-save work takes its time (a summary model call)
            working.set()
            release.wait(300)

        a.engine.summarize_after_save = slow_summary
        try:
            first = a.ask(U, None, "hello", history=[], summary=None, cache=ContextCache())
            assert working.wait(300) and first.live.saved is not None
            view = store.open_session(U, first.session.session_id)
            b.model._delay = 0
            later = b.ask(U, view.session, "right away", history=view.messages, summary=None, cache=ContextCache())
        finally:
            release.set()
        done(a, first)
        done(b, later)


class TestAnAnswerThatEndsEarlyIsStillCounted:
    """The provider bills the prompt and the output already produced, also for a stopped or dropped answer."""

    @pytest.fixture
    def fake(self):
        from tests.fake_anthropic import FakeAnthropic

        server = FakeAnthropic()
        yield server
        server.close()

    def claude(self, fake):
        from lib.services import make_model

        env = {
            "ANTHROPIC_API_KEY": "sk-test",
            "CHAT_ANTHROPIC_BASE_URL": fake.url,
            "CHAT_MODEL_MAX_RETRIES": "0",
            "CHAT_MODEL": "claude-test",
        }
        return make_model(Settings.load(env=env, secrets={}))

    def test_a_stopped_answer_keeps_the_reported_input_and_counts_its_output_and_is_logged_stopped(
        self, client, table, meter, store, fake, capsys
    ):
        from tests.fake_anthropic import Behaviour
        from tests.turn_helpers import wait_for

        fake.enqueue(Behaviour("text", chunks=[f"word{i} " for i in range(200)], chunk_delay_s=0.01, input_tokens=321))
        chat = service(client, table, meter, store, model=self.claude(fake))
        sent = chat.ask(U, None, "tell me a long story", history=[], summary=None, cache=ContextCache())
        wait_for(lambda: sent.live.chunks >= 5, timeout=300)
        chat.stop(sent.message.message_id)
        saved = done(chat, sent).saved
        assert saved.status == FAILED and saved.tokens_estimated
        assert saved.input_token == 321  # reported by the provider when the stream started
        assert saved.output_token >= 5  # counted from what arrived (one token a word here, at least)
        (line,) = [json.loads(x) for x in capsys.readouterr().err.splitlines() if '"turn.saved"' in x]
        assert (line["outcome"], line["stopped"], line["tokens_estimated"]) == ("failed", True, True)
        assert store.open_session(U, sent.session.session_id).messages[0].tokens_estimated

    def test_a_dropped_answer_is_counted_and_not_logged_as_stopped(self, client, table, meter, store, fake, capsys):
        from tests.fake_anthropic import Behaviour

        fake.enqueue(Behaviour("drop", chunks=["Half ", "an ", "answer "], input_tokens=77))
        chat = service(client, table, meter, store, model=self.claude(fake))
        saved = done(chat, chat.ask(U, None, "q", history=[], summary=None, cache=ContextCache())).saved
        assert (saved.status, saved.input_token, saved.tokens_estimated) == (FAILED, 77, True)
        assert saved.output_token > 0
        (line,) = [json.loads(x) for x in capsys.readouterr().err.splitlines() if '"turn.saved"' in x]
        assert line["stopped"] is False

    def test_a_complete_answer_has_the_providers_exact_counts(self, client, table, meter, store, fake):
        from tests.fake_anthropic import Behaviour

        fake.enqueue(Behaviour("text", input_tokens=40, output_tokens=9))
        chat = service(client, table, meter, store, model=self.claude(fake))
        saved = done(chat, chat.ask(U, None, "q", history=[], summary=None, cache=ContextCache())).saved
        assert (saved.status, saved.input_token, saved.output_token, saved.tokens_estimated) == (DONE, 40, 9, False)


class TestOrganizingMovesTheChatsCounter:
    """Pin, move and deleting a project write the chat's meta and rows: each must move the chat's change counter by
    one, so another tab that loaded the chat at the old value notices and reloads (this process's own counter)."""

    def answered(self, chat, store):
        live = done(chat, chat.ask(U, None, "hello", history=[], summary=None, cache=ContextCache()))
        return store.get_session(U, live.session_id)

    def test_a_pin_and_an_unpin_each_move_the_counter_by_one(self, chat, store):
        session = self.answered(chat, store)
        before = chat.version(U, session.session_id)
        pinned = chat.pin(U, session, True)
        assert pinned.value.pinned_at is not None
        assert pinned.version == before + 1 == chat.version(U, session.session_id)
        unpinned = chat.pin(U, pinned.value, False)
        assert unpinned.version == before + 2 == chat.version(U, session.session_id)

    def test_a_move_into_a_project_and_out_of_it_each_move_the_counter_by_one(self, chat, store):
        session = self.answered(chat, store)
        project = store.projects.create(U, "Kayaks")
        before = chat.version(U, session.session_id)
        moved = chat.move(U, session, project.project_id)
        assert moved.value.project_id == project.project_id
        assert moved.version == before + 1 == chat.version(U, session.session_id)
        out = chat.move(U, moved.value, None)
        assert out.value.project_id is None
        assert out.version == before + 2 == chat.version(U, session.session_id)

    def test_deleting_a_project_moves_the_counter_of_each_chat_it_held(self, chat, store):
        first, second = self.answered(chat, store), self.answered(chat, store)
        project = store.projects.create(U, "Kayaks")
        moved = [chat.move(U, s, project.project_id).value for s in (first, second)]
        before = {s.session_id: chat.version(U, s.session_id) for s in moved}
        chat.delete_project(U, project.project_id)
        after = {s.session_id: chat.version(U, s.session_id) for s in moved}
        assert after == {s: v + 1 for s, v in before.items()}
        assert all(store.get_session(U, s).project_id is None for s in after)
