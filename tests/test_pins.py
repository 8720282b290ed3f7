"""Pinned chats on a real (moto) table: the sidebar's order, the request budget, races, and every operator path
that reads sidebar rows (check, repair, retention, purge)."""

import datetime as dt
import threading

import pytest

from lib.errors import SessionNotFound
from lib.ops.invariants import check_user
from lib.ops.repair import repair
from lib.ops.retention import retention
from lib.ops.users import purge_user, summarize
from lib.storage import keys
from lib.storage.gateway import to_item
from lib.storage.operator import Operator
from tests.pages import DEV, button, new_browser, requests_made, send, services, sidebar_titles
from tests.turn_helpers import sends_racing

A, B = "alice@example.com", "bob@example.com"
PROMPT = "p"


def chats(store, user, count):
    """`count` chats, the newest last."""
    return [store.create_session(user, f"chat {i}", system_prompt_id=PROMPT)[0] for i in range(count)]


def sidebar(store, user, **kwargs):
    return [(s.title, s.pinned) for s in store.list_sessions(user, **kwargs).items]


def assert_consistent(client, table, user):
    report = check_user(client, table, user)
    assert report.ok, report.violations


class TestPinning:
    def test_pinned_chats_come_first_in_the_order_they_were_pinned(self, store, client, table):
        c0, c1, c2, c3 = chats(store, A, 4)
        store.set_pinned(A, c1, True)
        store.set_pinned(A, c0, True)
        assert sidebar(store, A) == [("chat 1", True), ("chat 0", True), ("chat 3", False), ("chat 2", False)]
        assert_consistent(client, table, A)

    def test_newer_messages_elsewhere_never_move_a_pinned_chat_down(self, store):
        c0, c1, c2 = chats(store, A, 3)
        store.set_pinned(A, c0, True)
        store.send_message(A, c2, "newer", system_prompt_id=PROMPT)
        store.send_message(A, c1, "newest", system_prompt_id=PROMPT)
        assert sidebar(store, A) == [("chat 0", True), ("chat 1", False), ("chat 2", False)]

    def test_pinning_and_unpinning_keep_the_last_message_time(self, store):
        c0, c1 = chats(store, A, 2)
        pinned = store.set_pinned(A, c0, True)
        assert pinned.last_message_time == c0.last_message_time and pinned.pinned_at is not None
        assert store.get_session(A, c0.session_id).last_message_time == c0.last_message_time
        assert store.list_sessions(A).items[0].last_message_time == c0.last_message_time
        unpinned = store.set_pinned(A, pinned, False)
        assert unpinned.pinned_at is None and unpinned.last_message_time == c0.last_message_time
        assert sidebar(store, A) == [("chat 1", False), ("chat 0", False)]  # back in time order, not on top

    def test_a_send_to_a_pinned_chat_keeps_its_place_and_moves_its_time(self, store, client, table):
        c0, c1, c2 = chats(store, A, 3)
        c0 = store.set_pinned(A, c0, True)
        c1 = store.set_pinned(A, c1, True)
        sent, _ = store.send_message(A, c0, "still pinned", system_prompt_id=PROMPT)
        rows = store.list_sessions(A).items
        assert [(r.title, r.pinned) for r in rows] == [("chat 0", True), ("chat 1", True), ("chat 2", False)]
        assert rows[0].last_message_time == sent.last_message_time > c0.last_message_time
        store.set_pinned(A, sent, False)  # unpinned after its send: the newest chat, so on top
        assert sidebar(store, A) == [("chat 1", True), ("chat 0", False), ("chat 2", False)]
        assert_consistent(client, table, A)

    def test_pinning_twice_is_a_no_op_without_a_request(self, store, requests):
        (c0,) = chats(store, A, 1)
        pinned = store.set_pinned(A, c0, True)
        requests.reset()
        assert store.set_pinned(A, pinned, True) is pinned and requests.names == []


class TestBudget:
    def test_a_pin_is_one_transaction_of_three_actions_and_six_wru(self, store, requests, meter):
        (c0,) = chats(store, A, 1)
        requests.reset()
        store.set_pinned(A, c0, True)
        assert requests.names == ["TransactWriteItems"]
        assert [next(iter(a)) for a in requests.calls[0][1]["TransactItems"]] == ["Update", "Delete", "Put"]
        assert sum(r.units for r in meter.records() if r.action == "pin") == 6

    def test_a_send_to_a_pinned_chat_is_one_transaction_of_three_actions_and_six_wru(self, store, requests, meter):
        (c0,) = chats(store, A, 1)
        pinned = store.set_pinned(A, c0, True)
        requests.reset()
        store.send_message(A, pinned, "hi", system_prompt_id=PROMPT)
        assert requests.names == ["TransactWriteItems"]
        assert [next(iter(a)) for a in requests.calls[0][1]["TransactItems"]] == ["Put", "Update", "Update"]
        assert sum(r.units for r in meter.records() if r.action == "send") == 6

    def test_the_sidebar_stays_one_query_with_pinned_rows_and_pages_across_them(self, store, requests):
        made = chats(store, A, 5)
        for session in made[:3]:
            store.set_pinned(A, session, True)
        requests.reset()
        first = store.list_sessions(A, limit=2)
        assert requests.names == ["Query"] and [s.title for s in first.items] == ["chat 0", "chat 1"]
        second = store.list_sessions(A, cursor=first.cursor, limit=2)
        third = store.list_sessions(A, cursor=second.cursor, limit=2)
        assert [s.title for s in second.items + third.items] == ["chat 2", "chat 4", "chat 3"]


class TestRaces:
    def test_two_tabs_pinning_at_once_leave_one_pinned_row(self, store, client, table):
        for _ in range(5):
            (session,) = chats(store, A, 1)
            start = threading.Barrier(2)
            failures = []

            def tab(session=session, start=start, failures=failures):
                start.wait()
                try:
                    store.set_pinned(A, session, True)
                except BaseException as exc:  # re-raised below
                    failures.append(exc)

            threads = [threading.Thread(target=tab) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not failures
            assert store.get_session(A, session.session_id).pinned_at is not None
        assert all(pinned for _, pinned in sidebar(store, A)) and len(sidebar(store, A)) == 5
        assert_consistent(client, table, A)

    def test_pin_and_unpin_racing_sends_leave_one_row_at_the_meta(self, store, client, table):
        (session,) = chats(store, A, 1)
        sent = sends_racing(
            store, A, session, lambda i: store.set_pinned(A, store.get_session(A, session.session_id), i % 2 == 0)
        )
        assert store.get_session(A, session.session_id).message_count == 1 + len(sent)
        assert_consistent(client, table, A)  # one row, at the meta's time, pinned exactly when the meta is


class TestIsolation:
    def test_pinning_another_users_chat_by_a_forged_id_changes_nothing(self, store, client, table):
        (alices,) = chats(store, A, 1)
        with pytest.raises(SessionNotFound):
            store.set_pinned(B, alices, True)  # keys come from Bob's id: Alice's chat is not in his partition
        assert sidebar(store, A) == [("chat 0", False)] and sidebar(store, B) == []
        assert_consistent(client, table, A)


class TestOperators:
    def test_check_reports_a_pinned_row_the_meta_does_not_know_and_repair_fixes_it(self, store, client, table, meter):
        (c0,) = chats(store, A, 1)
        pinned = store.set_pinned(A, c0, True)
        client.update_item(  # the meta loses its pin, as a hand edit would
            TableName=table, Key=to_item(keys.meta_key(A, c0.session_id)), UpdateExpression="REMOVE pinned_at"
        )
        report = check_user(client, table, A)
        assert [v.what for v in report.problems] == ["sidebar row is pinned, meta is unpinned"]
        repair(Operator(client, table, meter), report, dry_run=False)
        assert_consistent(client, table, A)
        assert sidebar(store, A) == [("chat 0", False)] and pinned.pinned_at is not None

    def test_retention_deletes_a_pinned_chat_last_active_before_the_cutoff(self, store, client, table, meter):
        long_ago = dt.datetime.now(dt.UTC) - dt.timedelta(days=200)
        with keys.clock(lambda: long_ago):
            old, kept_old = chats(store, A, 2)
        (recent,) = chats(store, A, 1)
        store.set_pinned(A, old, True)
        store.set_pinned(A, recent, True)
        retention(Operator(client, table, meter), 90, dry_run=False)
        assert sidebar(store, A) == [("chat 0", True)]  # the recent pinned chat; both old ones are gone
        assert_consistent(client, table, A)

    def test_purge_and_the_user_summary_count_pinned_chats(self, store, client, table, meter):
        c0, c1 = chats(store, A, 2)
        store.set_pinned(A, c0, True)
        db = Operator(client, table, meter)
        summary = summarize(db, A)
        assert summary.sessions == 2 and summary.last_activity == c1.last_message_time
        purge_user(db, A, dry_run=False)
        assert store.list_sessions(A).items == []
        assert (
            client.query(
                TableName=table,
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": {"S": keys.user_pk(A)}},
            )["Items"]
            == []
        )


@pytest.mark.usefixtures("app_env")
class TestThePage:
    def test_pin_in_the_header_moves_the_chat_under_pinned_with_one_request_and_unpin_moves_it_back(self):
        store = services().store
        older, _ = store.create_session(DEV, "older chat", system_prompt_id="default-v1")
        store.create_session(DEV, "newer chat", system_prompt_id="default-v1")
        at = new_browser(session=older.session_id)
        assert sidebar_titles(at) == ["newer chat", "older chat"]
        made = requests_made(lambda: button(at, "Pin").click().run())
        assert not at.exception
        assert [r.action for r in made] == ["pin"]  # the sidebar is redrawn from what the write returned
        assert sidebar_titles(at) == ["older chat", "newer chat"]
        assert "Pinned" in [c.value for c in at.sidebar.caption]
        assert sidebar_titles(new_browser()) == ["older chat", "newer chat"]  # another browser reads the same
        button(at, "Unpin").click().run()
        assert not at.exception and sidebar_titles(at) == ["newer chat", "older chat"]
        assert "Pinned" not in [c.value for c in at.sidebar.caption]
        assert store.get_session(DEV, older.session_id).last_message_time == older.last_message_time

    def test_a_follow_up_in_a_pinned_chat_keeps_it_on_top(self):
        store = services().store
        pinned, _ = store.create_session(DEV, "pinned chat", system_prompt_id="default-v1")
        store.create_session(DEV, "other chat", system_prompt_id="default-v1")
        at = new_browser(session=pinned.session_id)
        button(at, "Pin").click().run()
        at = send(at, "a follow-up")
        assert not at.exception and sidebar_titles(at) == ["pinned chat", "other chat"]
        assert sidebar_titles(new_browser()) == ["pinned chat", "other chat"]
