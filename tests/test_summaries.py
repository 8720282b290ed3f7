"""Running summaries: read with the chat in its one Query, written after the answer, exactly one per race."""

import threading

import pytest

from lib.config import Settings
from lib.context.engine import ContextEngine
from lib.context.summaries import EXTRACTIVE_HEADER, Summarizer, due, extractive, summarize_after_save
from lib.model.models import DemoModel
from lib.storage import keys
from lib.storage.records import Summary
from lib.storage.summaries import SummaryChanged, SummaryStore

U = "sam@example.com"


def chat(store, n, question="turn {i}: we talk about item {i}", start=None):
    """n finished turns in one session; returns the session and its turns oldest first."""
    session, turns = None, []
    for i in range(n):
        if session is None:
            session, message = store.create_session(U, question.format(i=i), system_prompt_id="default-v1")
        else:
            session, message = store.send_message(U, session, question.format(i=i), system_prompt_id="default-v1")
        turns.append(
            store.finish_message(
                U,
                message,
                output_body=f"Answer {i}. More words follow here.",
                input_token=1,
                output_token=1,
                response_start_time=message.create_time,
                response_end_time=message.create_time,
            )
        )
    return session, turns


def settings(**extra):
    return Settings.load(env={"CHAT_MODEL_PROVIDER": "demo", **extra}, secrets={}, for_operator=True)


@pytest.fixture
def summaries(client, table, meter):
    return SummaryStore(client, table, meter)


class TestOpenSession:
    def test_summary_meta_and_19_turns_arrive_in_one_query_of_the_designs_limit_21(self, store, summaries, requests):
        session, turns = chat(store, 25)
        summaries.put(
            U,
            Summary(
                session.session_id, "- early things", 0, turns[4].message_id, 5, "extractive", "extractive", keys.now()
            ),
            previous=None,
        )
        requests.reset()
        view = store.open_session(U, session.session_id)
        assert requests.names == ["Query"] and requests.calls[0][1]["Limit"] == 21
        assert view.summary.text == "- early things" and view.summary.version == 1
        assert [m.message_id for m in view.messages] == [t.message_id for t in turns[6:]]
        older = store.open_session(U, session.session_id, cursor=view.cursor)
        assert [m.message_id for m in older.messages] == [t.message_id for t in turns[:6]] and older.cursor is None

    def test_without_a_summary_pages_of_20_reach_every_turn_once(self, store):
        session, turns = chat(store, 45)
        view = store.open_session(U, session.session_id)
        assert view.summary is None and len(view.messages) == 20
        loaded = [m.message_id for m in view.messages]
        while view.cursor:
            view = store.open_session(U, session.session_id, cursor=view.cursor)
            loaded = [m.message_id for m in view.messages] + loaded
        assert loaded == [t.message_id for t in turns]


class TestConditionalWrite:
    def test_two_finishers_from_the_same_version_write_exactly_one_summary(self, summaries, store):
        session, turns = chat(store, 2)
        results, barrier = [], threading.Barrier(2)

        def finisher(text):
            barrier.wait()
            try:
                results.append(
                    summaries.put(
                        U,
                        Summary(
                            session.session_id, text, 0, turns[0].message_id, 1, "extractive", "extractive", keys.now()
                        ),
                        previous=None,
                    )
                )
            except SummaryChanged:
                results.append("dropped")

        threads = [threading.Thread(target=finisher, args=(t,)) for t in ("tab one", "tab two")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(map(str, results)).count("dropped") == 1
        stored = summaries.get(U, session.session_id)
        assert stored.version == 1 and stored.text in ("tab one", "tab two")
        with pytest.raises(SummaryChanged):  # a writer still holding the old version loses too
            summaries.put(U, stored, previous=None)
        assert summaries.put(U, stored, previous=1).version == 2


class TestWhenToSummarise:
    def test_due_only_when_enough_turns_left_the_verbatim_window(self, store):
        _, turns = chat(store, 15)
        assert due(turns, None, verbatim_turns=6, every=10) == []
        _, more = chat(store, 16)
        assert [t.message_id for t in due(more, None, verbatim_turns=6, every=10)] == [t.message_id for t in more[:10]]

    def test_after_save_summarises_incrementally_and_never_deletes_a_turn(self, store, summaries, requests):
        engine_settings = settings()
        summarizer = Summarizer(DemoModel(delay_s=0), engine_settings.summary_model, 600)
        session, turns = chat(store, 16)
        requests.reset()
        outcome = summarize_after_save(summaries, summarizer, U, session, turns, None, verbatim_turns=6, every=10)
        assert outcome.written and requests.names == ["PutItem"]  # the loaded turns sufficed: nothing read
        first = outcome.summary
        assert (first.version, first.covered_until, first.covered_turns, first.method) == (
            1,
            turns[9].message_id,
            10,
            "extractive",
        )
        assert first.text.startswith(EXTRACTIVE_HEADER) and "turn 0: we talk about item 0" in first.text
        # Ten more turns: the next summary is built on the first, and every turn is still stored.
        session, later = chat_more(store, session, 10)
        loaded = (turns + later)[-20:]
        second = summarize_after_save(
            summaries, summarizer, U, session, loaded, first, verbatim_turns=6, every=10
        ).summary
        assert (second.version, second.covered_turns, second.covered_until) == (2, 20, (turns + later)[19].message_id)
        assert "item 0" in second.text and "item 19" in second.text
        assert len(store.all_messages(U, session.session_id)) == 26

    def test_a_chat_older_than_its_summary_is_read_once_after_the_answer(self, store, summaries, requests):
        session, turns = chat(store, 40)
        summarizer = Summarizer(DemoModel(delay_s=0), "x", 600)
        requests.reset()
        outcome = summarize_after_save(summaries, summarizer, U, session, turns[-20:], None, verbatim_turns=6, every=10)
        assert requests.names == ["Query", "PutItem"]
        assert outcome.summary.covered_turns == 34 and outcome.summary.covered_until == turns[33].message_id

    def test_the_extractive_summary_stays_within_its_tokens_and_says_what_it_dropped(self, store):
        _, turns = chat(store, 30, question="turn {i}: " + "long words " * 30)
        text = extractive("", turns, 200)
        from lib import tokens

        assert tokens.count(text) <= 200 and "earlier turns no longer summarised" in text
        assert "turn 29" in text  # the newest survive


def chat_more(store, session, n):
    turns = []
    for i in range(n):
        session, message = store.send_message(U, session, f"later turn {i}: item {16 + i}", system_prompt_id="p")
        turns.append(
            store.finish_message(
                U,
                message,
                output_body=f"Later answer {i}.",
                input_token=1,
                output_token=1,
                response_start_time=message.create_time,
                response_end_time=message.create_time,
            )
        )
    return session, turns


class TestRegenerate:
    def test_regenerate_rebuilds_the_same_turns_as_a_new_version(self, store, summaries):
        summarizer = Summarizer(DemoModel(delay_s=0), "x", 600)
        session, turns = chat(store, 16)
        first = summarize_after_save(summaries, summarizer, U, session, turns, None, verbatim_turns=6, every=10).summary
        from lib.context.summaries import divider_label, regenerate_summary

        again = regenerate_summary(summaries, summarizer, U, session.session_id, first, every=10)
        assert again.written and again.summary.version == 2
        assert (again.summary.covered_until, again.summary.covered_turns) == (first.covered_until, 10)
        assert again.summary.text == first.text  # deterministic offline
        assert divider_label(again.summary) == "Earlier turns summarised (10 turns, extractive summary, demo model)"
        stale = regenerate_summary(summaries, summarizer, U, session.session_id, first, every=10)
        assert stale.dropped and stale.summary.version == 2  # the user's view was old: nothing overwritten


class TestSummaryModel:
    def test_claude_writes_the_summary_with_the_cheaper_model_and_its_tokens_are_metered(
        self, store, client, table, meter, fake_model
    ):
        from lib.services import make_model
        from lib.usage.ledger import Ledger
        from tests.fake_anthropic import Behaviour

        s = Settings.load(secrets={}, for_operator=True)
        ledger = Ledger(client, table, meter)
        engine = ContextEngine(client, table, meter, make_model(s), s, ledger)
        session, turns = chat(store, 16)
        fake_model.enqueue(
            Behaviour("text", chunks=["- the user discussed items 0 to 9"], input_tokens=900, output_tokens=40)
        )
        outcome = engine.summarize_after_save(U, session, turns, None)
        assert outcome.summary.text == "- the user discussed items 0 to 9" and outcome.summary.method == "model"
        body = fake_model.requests[-1]["body"]
        assert body["model"] == "claude-haiku-4-5" and "item 9" in body["messages"][0]["content"]
        assert "item 10" not in body["messages"][0]["content"]  # the verbatim window is not summarised
        (bucket,) = ledger.pending()
        assert bucket.counters["ti|claude-haiku-4-5 (summary)"] == 900
        assert bucket.counters["to|claude-haiku-4-5 (summary)"] == 40

    def test_a_failing_summary_model_leaves_the_chat_alone(self, store, client, table, meter, fake_model):
        from lib.services import make_model
        from tests.fake_anthropic import Behaviour

        s = Settings.load(secrets={}, for_operator=True)
        engine = ContextEngine(client, table, meter, make_model(s), s)
        session, turns = chat(store, 16)
        fake_model.enqueue(Behaviour("status", status=500, error_type="api_error"))
        outcome = engine.summarize_after_save(U, session, turns, None)
        assert outcome.summary is None and not outcome.written
        assert engine.summaries.get(U, session.session_id) is None
