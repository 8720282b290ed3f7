"""The demo history: a newcomer's first click, so written in few requests (batches for the older days, the chat
page's own verbs for the newest chats), for the user who asked and the demo colleagues only, and indistinguishable
from typed chats to the checker, the chat page and Search."""

import datetime as dt

import pytest

from lib.config import Settings
from lib.ops.invariants import check_user
from lib.ops.users import registered_users
from lib.search.hybrid import search_chats
from lib.storage import keys
from lib.storage.demo import turn_item
from lib.storage.gateway import from_item, to_item
from lib.storage.operator import Operator
from lib.turn.demo import COLLEAGUES, seed_demo
from lib.web import ui
from tests.pages import DEV

CAROL = "carol@example.com"
END = dt.datetime(2026, 11, 27, 18, tzinfo=dt.timezone.utc)  # a Friday: three working weeks behind it


@pytest.fixture
def svc(app_env):
    return ui._services(Settings.load())


class TestFewRequests:
    def test_three_weeks_of_demo_chats_take_a_few_hundred_requests_not_two_thousand(self, svc):
        meter = svc.database.meter
        before = len(meter.records())
        counts = seed_demo(svc, end=END)
        requests = meter.records()[before:]
        assert counts["sessions"] >= 40 and counts["turns"] >= 120
        assert len(requests) <= 300, {r.operation for r in requests}  # it was 1,846 (one request per verb)
        assert {r.action for r in requests} >= {"admin", "index", "create", "send", "finish", "title", "open"}

    def test_progress_is_told_in_plain_words_from_nothing_to_done(self, svc):
        heard = []
        seed_demo(svc, end=END, progress=lambda done, text: heard.append((done, text)))
        fractions = [done for done, _ in heard]
        assert fractions == sorted(fractions) and fractions[0] == 0.0 and fractions[-1] == 1.0
        assert all(text and "store" not in text and "batch" not in text for _, text in heard)


class TestWhoseHistory:
    def test_the_demo_belongs_to_the_user_who_asked_and_the_demo_colleagues_only(self, svc):
        seed_demo(svc, user=CAROL, end=END)
        db = Operator.of(svc.database)
        assert set(registered_users(db)) == {CAROL, *COLLEAGUES}
        assert len(svc.store.list_sessions(CAROL).items) >= 10
        assert svc.store.list_sessions(DEV).items == []


class TestLikeTypedChats:
    def test_every_demo_user_passes_the_checker_and_batch_turns_read_back_whole(self, svc):
        seed_demo(svc, end=END)
        for user in (DEV, *COLLEAGUES):
            report = check_user(svc.database.client, svc.database.table, user)
            assert report.ok, report.violations
        oldest = svc.store.list_sessions(DEV).items[-1]  # three weeks ago: written in a batch
        turns = svc.store.all_messages(DEV, oldest.session_id)
        assert turns and all(t.output_body and t.model == "demo" and t.context for t in turns)
        assert all(t.status == "done" or t.error for t in turns)

    def test_search_finds_a_turn_of_the_batch_written_weeks(self, svc):
        seed_demo(svc, end=END)
        indexer = svc.indexer
        oldest = svc.store.list_sessions(DEV).items[-1]
        question = svc.store.all_messages(DEV, oldest.session_id)[0].input_body
        found = search_chats(indexer.vectors, indexer.embedder, DEV, question, top=5)
        assert oldest.session_id in {r.session_id for r in found.results}


class TestTurnItem:
    """lib.storage.demo.turn_item builds what the store's verbs leave: checked against the store itself."""

    @pytest.mark.parametrize("outcome", ["done", "failed"])
    def test_a_batch_turn_item_is_the_item_the_verbs_write(self, store, client, table, outcome):
        session, pending = store.create_session(CAROL, "What is a ULID?\n  and why?", system_prompt_id="p")
        fields = dict(
            output_body="A sortable id.",
            input_token=12,
            output_token=5,
            response_start_time=pending.create_time,
            response_end_time=keys.later_than(pending.create_time),
            model="demo",
            context=[{"kind": "system", "tokens": 3}, {"kind": "question", "tokens": 4}],
        )
        if outcome == "done":
            saved = store.finish_message(CAROL, pending, **fields)
        else:
            saved = store.fail_message(CAROL, pending, error="The model is overloaded right now.", **fields)
        stored = client.get_item(
            TableName=table, Key=to_item(keys.message_key(CAROL, session.session_id, saved.message_id))
        )
        item, message = turn_item(CAROL, saved)
        assert from_item(item) == from_item(stored["Item"])
        assert message == saved and message.size == saved.size
