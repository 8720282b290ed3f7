"""The chat service (lib/turn/chat.py) on its own, no page: a turn's life from the commit to the post-save work,
what the worker may and may not touch, the hot-tier counter after every write, and failures named truly."""

from __future__ import annotations

import dataclasses
import json

import pytest

from lib.config import Settings
from lib.context.cache import ContextCache, MemoryState
from lib.context.engine import ContextEngine
from lib.errors import ChatError, EmptyQuestion, GenerationLimit
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
    assert sent.live.wait(30), "the worker did not finish"
    return sent.live


class TestATurn:
    def test_the_question_is_committed_before_the_answer_and_the_worker_saves_it(self, chat, store, requests):
        sent = chat.ask(U, None, "How do ULIDs sort?", history=[], summary=None, cache=ContextCache())
        assert requests.names[0] == "TransactWriteItems"  # the commit comes first
        assert sent.first and sent.message.status == PENDING and sent.version is None  # no hot tier
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
        slow = service(client, table, meter, store, model=DemoModel(delay_s=0.05))
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
