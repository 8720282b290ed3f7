"""ChatStore on a real (moto) table per test: request budget, ordering, paging, isolation, races, limits."""

import threading

import pytest

from lib.errors import (
    EmptyMessage,
    InvalidCursor,
    InvalidTitle,
    MessageNotFound,
    MessageNotPending,
    MessageTooLarge,
    SessionChanged,
    SessionNotFound,
    StoreUnavailable,
)
from lib.ops.invariants import check_user
from lib.storage import keys
from lib.storage.itemsize import ITEM_LIMIT_BYTES
from lib.storage.records import DONE, FAILED, PENDING
from lib.storage.store import QUESTION_LIMIT_BYTES, ChatStore, to_item

A, B = "alice@example.com", "bob@example.com"
PROMPT = "default-v1"


def finish(store, user, message, text="answer"):
    return store.finish_message(
        user,
        message,
        output_body=text,
        input_token=3,
        output_token=5,
        response_start_time=message.create_time,
        response_end_time=keys.now(),
    )


def transact_actions(params):
    return [next(iter(action)) for action in params["TransactItems"]]


class TestRequestBudget:
    def test_create_session_is_one_transaction_of_three_puts_and_the_registry(self, store, requests, client, table):
        store.create_session(A, "hello", system_prompt_id=PROMPT)
        assert requests.names == ["TransactWriteItems"]
        assert transact_actions(requests.calls[0][1]) == ["Put", "Put", "Put", "Update"]
        first = client.get_item(TableName=table, Key=to_item(keys.registry_key(A)))["Item"]
        store.create_session(A, "again", system_prompt_id=PROMPT)
        second = client.get_item(TableName=table, Key=to_item(keys.registry_key(A)))["Item"]
        assert (
            second["first_time"] == first["first_time"]
            and second["last_create_time"]["S"] > first["last_create_time"]["S"]
        )

    def test_send_is_one_transaction_of_four_actions_and_no_read(self, store, requests):
        session, _ = store.create_session(A, "hello", system_prompt_id=PROMPT)
        requests.reset()
        store.send_message(A, session, "again", system_prompt_id=PROMPT)
        assert requests.names == ["TransactWriteItems"]
        assert transact_actions(requests.calls[0][1]) == ["Put", "Update", "Delete", "Put"]

    def test_finish_and_fail_are_one_update_each(self, store, requests):
        session, first = store.create_session(A, "hello", system_prompt_id=PROMPT)
        session, second = store.send_message(A, session, "again", system_prompt_id=PROMPT)
        requests.reset()
        finish(store, A, first)
        store.fail_message(A, second, output_body="partial", error="model overloaded")
        assert requests.names == ["UpdateItem", "UpdateItem"]

    def test_rename_is_one_transaction_of_two_updates(self, store, requests):
        session, _ = store.create_session(A, "hello", system_prompt_id=PROMPT)
        requests.reset()
        store.rename_session(A, session, "Greetings")
        assert requests.names == ["TransactWriteItems"]
        assert transact_actions(requests.calls[0][1]) == ["Update", "Update"]

    def test_sidebar_and_open_are_one_consistent_descending_query_each(self, store, requests):
        session, _ = store.create_session(A, "hello", system_prompt_id=PROMPT)
        requests.reset()
        store.list_sessions(A)
        store.open_session(A, session.session_id)
        assert requests.names == ["Query", "Query"]
        sidebar, opened = (params for _, params in requests.calls)
        assert sidebar["Limit"] == 20 and opened["Limit"] == 21  # meta + 20 turns (or meta + summary + 19)
        assert all(p["ConsistentRead"] and p["ScanIndexForward"] is False for p in (sidebar, opened))
        assert sidebar["ExpressionAttributeValues"][":prefix"] == {"S": "SES#"}


class TestOrdering:
    def test_sends_to_a_b_a_put_a_on_top(self, store):
        a, _ = store.create_session(A, "session A", system_prompt_id=PROMPT)
        _b, _ = store.create_session(A, "session B", system_prompt_id=PROMPT)
        a, _ = store.send_message(A, a, "A again", system_prompt_id=PROMPT)
        assert [s.title for s in store.list_sessions(A).items] == ["session A", "session B"]

    def test_finishing_a_turn_does_not_move_the_sidebar(self, store):
        _a, first = store.create_session(A, "session A", system_prompt_id=PROMPT)
        store.create_session(A, "session B", system_prompt_id=PROMPT)
        finish(store, A, first)
        assert [s.title for s in store.list_sessions(A).items] == ["session B", "session A"]

    def test_45_sessions_page_out_each_once_newest_first(self, store, requests):
        created = [store.create_session(A, f"chat {i}", system_prompt_id=PROMPT)[0].session_id for i in range(45)]
        requests.reset()
        seen, cursor, pages = [], None, 0
        while True:
            page = store.list_sessions(A, cursor=cursor)
            seen += [s.session_id for s in page.items]
            pages += 1
            if page.cursor is None:
                break
            cursor = page.cursor
        assert seen == list(reversed(created))
        assert requests.names == ["Query"] * pages and pages == 3

    def test_45_turns_page_out_each_once_oldest_first(self, store, requests):
        session, _message = store.create_session(A, "turn 0", system_prompt_id=PROMPT)
        for i in range(1, 45):
            session, _ = store.send_message(A, session, f"turn {i}", system_prompt_id=PROMPT)
        requests.reset()
        view = store.open_session(A, session.session_id)
        assert view.session.message_count == 45
        pages = [view.messages]
        while view.cursor:
            view = store.open_session(A, session.session_id, cursor=view.cursor)
            assert view.session is None
            pages.append(view.messages)
        turns = [m.input_body for page in reversed(pages) for m in page]
        assert turns == [f"turn {i}" for i in range(45)]
        assert [len(p) for p in pages] == [20, 20, 5] and requests.names == ["Query"] * 3

    def test_exactly_20_turns_need_no_second_query(self, store):
        session, _ = store.create_session(A, "turn 0", system_prompt_id=PROMPT)
        for i in range(1, 20):
            session, _ = store.send_message(A, session, f"turn {i}", system_prompt_id=PROMPT)
        view = store.open_session(A, session.session_id)
        assert len(view.messages) == 20 and view.cursor is None


class TestIsolation:
    @pytest.fixture
    def alice(self, store):
        session, message = store.create_session(A, "alice's secret", system_prompt_id=PROMPT)
        for i in range(25):
            store.create_session(A, f"alice chat {i}", system_prompt_id=PROMPT)
        return session, message

    def test_bob_cannot_list_or_open_alices_sessions(self, store, alice):
        session, _ = alice
        assert store.list_sessions(B).items == []
        with pytest.raises(SessionNotFound):
            store.open_session(B, session.session_id)

    def test_bob_cannot_finish_or_rename_alices_turns_and_creates_nothing(self, store, alice, client, table):
        session, message = alice
        with pytest.raises(MessageNotFound):
            finish(store, B, message)
        with pytest.raises(SessionNotFound):
            store.rename_session(B, session, "pwned")
        assert store.open_session(A, session.session_id).messages[0].status == PENDING
        assert store.open_session(A, session.session_id).session.title == "alice's secret"
        scanned = client.scan(TableName=table)["Items"]
        assert not [i for i in scanned if i["pk"]["S"].startswith(f"USER#{B}")]

    def test_bob_cannot_page_with_alices_cursor(self, store, alice):
        page = store.list_sessions(A)
        assert page.cursor
        with pytest.raises(InvalidCursor):
            store.list_sessions(B, cursor=page.cursor)

    def test_a_cursor_from_one_session_does_not_open_another(self, store):
        first, _ = store.create_session(A, "one", system_prompt_id=PROMPT)
        other, _ = store.create_session(A, "two", system_prompt_id=PROMPT)
        for i in range(25):
            first, _ = store.send_message(A, first, f"{i}", system_prompt_id=PROMPT)
        cursor = store.open_session(A, first.session_id).cursor
        with pytest.raises(InvalidCursor):
            store.open_session(A, other.session_id, cursor=cursor)
        with pytest.raises(InvalidCursor):
            store.list_sessions(A, cursor=cursor)

    @pytest.mark.parametrize("cursor", ["", "garbage", "a.b", "x" * 500, "eyJzayI6IlNFUyMifQ.AAAA", "..", "é.é"])
    def test_tampered_cursors_are_refused_without_a_request(self, store, requests, cursor):
        with pytest.raises(InvalidCursor):
            store.list_sessions(A, cursor=cursor)
        assert requests.names == []

    def test_a_cursor_signed_by_another_deployment_is_refused(self, store, client, table):
        other = ChatStore(client, table, cursor_secret="another-secret")
        for i in range(21):
            other.create_session(A, f"chat {i}", system_prompt_id=PROMPT)
        with pytest.raises(InvalidCursor):
            store.list_sessions(A, cursor=other.list_sessions(A).cursor)

    @pytest.mark.parametrize("session_id", ["", "nope", "01JC3Q8Z4F6M2V9K7T5R1N0B8D#SES#META", "../x", "0" * 27])
    def test_malformed_session_ids_are_not_found_without_a_request(self, store, requests, session_id):
        with pytest.raises(SessionNotFound):
            store.open_session(A, session_id)
        assert requests.names == []


class TestTurns:
    def test_a_finished_turn_keeps_answer_tokens_and_times(self, store):
        session, message = store.create_session(A, "q", system_prompt_id=PROMPT)
        done = finish(store, A, message, "the answer")
        assert (done.status, done.output_body, done.input_token, done.output_token) == (DONE, "the answer", 3, 5)
        assert store.open_session(A, session.session_id).messages == [done]

    def test_what_the_model_saw_is_kept_as_ids_and_counts_with_the_answer(self, store, requests):
        session, message = store.create_session(A, "q", system_prompt_id=PROMPT)
        seen = [
            {"kind": "system", "tokens": 40},
            {"kind": "memory", "tokens": 9, "id": "mem-1"},
            {"kind": "recalled", "tokens": 120, "id": "01ABC", "excerpt": True},
            {"kind": "question", "tokens": 2},
        ]
        requests.reset()
        done = store.finish_message(
            A,
            message,
            output_body="a",
            input_token=1,
            output_token=1,
            response_start_time=message.create_time,
            response_end_time=message.create_time,
            context=seen,
        )
        assert requests.names == ["UpdateItem"] and done.context == tuple(seen)
        assert store.open_session(A, session.session_id).messages[0].context == tuple(seen)
        _, other = store.send_message(
            A, store.open_session(A, session.session_id).session, "q2", system_prompt_id=PROMPT
        )
        failed = store.fail_message(A, other, output_body="", error="stopped", context=seen[:1])
        assert failed.context == ({"kind": "system", "tokens": 40},)

    def test_a_failed_turn_keeps_the_partial_answer_and_the_reason(self, store):
        _session, message = store.create_session(A, "q", system_prompt_id=PROMPT)
        failed = store.fail_message(A, message, output_body="half an ans", error="connection dropped")
        assert (failed.status, failed.output_body, failed.error) == (FAILED, "half an ans", "connection dropped")

    def test_the_second_finisher_loses_and_the_first_answer_stays(self, store):
        session, message = store.create_session(A, "q", system_prompt_id=PROMPT)
        finish(store, A, message, "first")
        with pytest.raises(MessageNotPending):
            finish(store, A, message, "second")
        assert store.open_session(A, session.session_id).messages[0].output_body == "first"

    def test_retry_reopens_a_failed_turn_without_a_second_question(self, store):
        session, message = store.create_session(A, "q", system_prompt_id=PROMPT)
        failed = store.fail_message(A, message, output_body="par", error="overloaded")
        again = store.restart_message(A, failed)
        assert again.status == PENDING and again.output_body == "" and again.error is None
        finish(store, A, again, "complete")
        view = store.open_session(A, session.session_id)
        assert [(m.input_body, m.output_body, m.status) for m in view.messages] == [("q", "complete", DONE)]
        with pytest.raises(MessageNotPending):
            store.restart_message(A, again)

    def test_feedback_is_stored_on_the_turn(self, store, requests):
        session, message = store.create_session(A, "q", system_prompt_id=PROMPT)
        finish(store, A, message)
        requests.reset()
        store.set_feedback(A, message, 1)
        assert requests.names == ["UpdateItem"]
        assert store.open_session(A, session.session_id).messages[0].feedback == 1
        store.set_feedback(A, message, None)
        assert store.open_session(A, session.session_id).messages[0].feedback is None

    def test_stale_pending_turns_are_recognised(self, store):
        import datetime as dt

        _, message = store.create_session(A, "q", system_prompt_id=PROMPT)
        later = keys.parse_time(message.create_time) + dt.timedelta(seconds=301)
        assert message.is_stale(300, at=later) and not message.is_stale(302, at=later)

    def test_rename_changes_sidebar_and_meta(self, store):
        session, _ = store.create_session(A, "q", system_prompt_id=PROMPT)
        renamed = store.rename_session(A, session, "  Key design\n notes ")
        assert renamed.title == "Key design notes"
        assert store.list_sessions(A).items[0].title == "Key design notes"
        assert store.open_session(A, session.session_id).session.title == "Key design notes"
        with pytest.raises(InvalidTitle):
            store.rename_session(A, renamed, "   ")
        with pytest.raises(InvalidTitle):
            store.rename_session(A, renamed, "x" * 121)

    def test_rename_with_a_stale_session_retries_with_the_fresh_one(self, store, requests):
        session, _ = store.create_session(A, "q", system_prompt_id=PROMPT)
        store.send_message(A, session, "moved on in another tab", system_prompt_id=PROMPT)
        requests.reset()
        store.rename_session(A, session, "New name")
        assert requests.names == ["TransactWriteItems", "GetItem", "TransactWriteItems"]
        assert [s.title for s in store.list_sessions(A).items] == ["New name"]

    def test_the_default_title_is_the_first_words_of_the_question(self, store):
        session, _ = store.create_session(
            A,
            "How should I   store chat history\nfor many users in DynamoDB without any index at all?",
            system_prompt_id=PROMPT,
        )
        assert session.title == "How should I store chat history for many users in DynamoDB…"


class TestLimits:
    @pytest.mark.parametrize("text", ["", "   ", "\n\t "])
    def test_an_empty_question_is_refused_before_any_request(self, store, requests, text):
        with pytest.raises(EmptyMessage):
            store.create_session(A, text, system_prompt_id=PROMPT)
        assert requests.names == []

    def test_an_oversize_question_is_refused_before_any_request_with_the_limit(self, store, requests):
        session, _ = store.create_session(A, "q", system_prompt_id=PROMPT)
        requests.reset()
        with pytest.raises(MessageTooLarge, match=r"over the limit of 405,504 bytes \(396 KB\)"):
            store.send_message(A, session, "x" * ITEM_LIMIT_BYTES, system_prompt_id=PROMPT)
        with pytest.raises(MessageTooLarge):
            store.create_session(A, "€" * (ITEM_LIMIT_BYTES // 3), system_prompt_id=PROMPT)
        assert requests.names == []

    def test_one_byte_over_says_one_byte_over(self, store, requests):
        session, message = store.create_session(A, "q", system_prompt_id=PROMPT)
        stored_with_one_char = message.size  # the item of a one-character question, by DynamoDB's size rule
        over = "x" * (QUESTION_LIMIT_BYTES - stored_with_one_char + 2)
        requests.reset()
        with pytest.raises(MessageTooLarge, match="Your message is 1 byte over the limit"):
            store.send_message(A, session, over, system_prompt_id=PROMPT)
        assert requests.names == []
        store.send_message(A, session, over[:-1], system_prompt_id=PROMPT)  # exactly at the limit is accepted

    def test_the_largest_question_allowed_is_stored_whole(self, store):
        session, _ = store.create_session(A, "q", system_prompt_id=PROMPT)
        text = "y" * (ITEM_LIMIT_BYTES - 4 * 1024 - 400)
        session, _message = store.send_message(A, session, text, system_prompt_id=PROMPT)
        assert store.open_session(A, session.session_id).messages[-1].input_body == text

    def test_an_oversize_answer_is_stored_cut_to_fit_and_flagged(self, store):
        session, message = store.create_session(A, "q" * 300_000, system_prompt_id=PROMPT)
        done = finish(store, A, message, "é" * 100_000)  # 200 KB of UTF-8: does not fit beside the question
        assert done.output_truncated and done.size <= ITEM_LIMIT_BYTES
        assert done.output_body and "é" * 40_000 in done.output_body
        assert store.open_session(A, session.session_id).messages[0].output_truncated


class TestRaces:
    def test_two_tabs_with_the_same_stale_session_both_send_and_leave_one_sidebar_row(
        self, store, requests, client, table
    ):
        session, _ = store.create_session(A, "start", system_prompt_id=PROMPT)
        _tab1, _ = store.send_message(A, session, "from tab 1", system_prompt_id=PROMPT)
        requests.reset()
        tab2, _ = store.send_message(A, session, "from tab 2", system_prompt_id=PROMPT)
        assert requests.names == ["TransactWriteItems", "GetItem", "TransactWriteItems"]
        assert_invariants(client, table, A)
        assert tab2.message_count == 3

    def test_a_send_from_a_tab_that_missed_a_rename_keeps_the_new_title_in_the_sidebar(
        self, store, requests, client, table
    ):
        session, _ = store.create_session(A, "hello", system_prompt_id=PROMPT)  # tab 1 holds this session
        store.rename_session(A, session, "Renamed in tab 2")
        requests.reset()
        sent, _ = store.send_message(A, session, "from tab 1", system_prompt_id=PROMPT)
        assert requests.names == ["TransactWriteItems", "GetItem", "TransactWriteItems"]  # lost once, re-read
        assert sent.title == "Renamed in tab 2"
        assert [row.title for row in store.list_sessions(A).items] == ["Renamed in tab 2"]
        assert_invariants(client, table, A)

    def test_a_deleted_session_is_not_found_on_retry(self, store, client, table):
        session, _ = store.create_session(A, "start", system_prompt_id=PROMPT)
        store.send_message(A, session, "moves it", system_prompt_id=PROMPT)
        client.delete_item(TableName=table, Key=to_item(keys.meta_key(A, session.session_id)))
        with pytest.raises(SessionNotFound):
            store.send_message(A, session, "stale", system_prompt_id=PROMPT)

    def test_threads_sending_to_one_session_keep_the_invariants(self, store, client, table):
        rounds, tabs = 20, 4
        for _ in range(rounds):
            session, _ = store.create_session(A, "race", system_prompt_id=PROMPT)
            errors = []

            def tab(i, session=session, errors=errors):
                try:
                    store.send_message(A, session, f"tab {i}", system_prompt_id=PROMPT)
                except SessionChanged:
                    errors.append(i)  # allowed: retries exhausted; the question was not stored

            threads = [threading.Thread(target=tab, args=(i,)) for i in range(tabs)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            view = store.open_session(A, session.session_id)
            assert view.session.message_count == 1 + tabs - len(errors)
        assert_invariants(client, table, A)


def assert_invariants(client, table, user):
    """One list item per session at the meta's time and title; message_count = messages (lib.ops.invariants)."""
    report = check_user(client, table, user)
    assert report.ok, report.violations


class TestRecordKinds:
    """Other record kinds in a session partition (summaries, and whatever comes later) never break a chat."""

    @pytest.mark.parametrize("sk", ["SUM#v1", "ZZZ#from-a-later-version", "AAA#sorts-first", "MSG#not-a-ulid"])
    def test_an_unknown_record_in_the_session_partition_does_not_break_opening_it(self, store, client, table, sk):
        session, message = store.create_session(A, "first", system_prompt_id=PROMPT)
        finish(store, A, message, "answer")
        client.put_item(
            TableName=table, Item=to_item({"pk": keys.session_pk(A, session.session_id), "sk": sk, "blob": "x"})
        )
        view = store.open_session(A, session.session_id)
        assert view.session.session_id == session.session_id
        assert [m.message_id for m in view.messages] == [message.message_id]
        assert [m.message_id for m in store.all_messages(A, session.session_id)] == [message.message_id]

    def test_paging_past_an_unknown_record_still_reaches_the_oldest_turn(self, store, client, table):
        session, first = store.create_session(A, "turn 0", system_prompt_id=PROMPT)
        ids = [first.message_id]
        for n in range(1, 25):
            session, message = store.send_message(A, session, f"turn {n}", system_prompt_id=PROMPT)
            ids.append(message.message_id)
        client.put_item(TableName=table, Item=to_item({"pk": keys.session_pk(A, session.session_id), "sk": "SUM#v1"}))
        view = store.open_session(A, session.session_id)
        loaded = [m.message_id for m in view.messages]
        while view.cursor:
            view = store.open_session(A, session.session_id, cursor=view.cursor)
            loaded = [m.message_id for m in view.messages] + loaded
        assert loaded == ids

    def test_record_kinds_are_named_by_their_sort_key(self):
        mid = keys.new_id()
        assert keys.record_kind(keys.META_SK) == keys.META
        assert keys.record_kind(f"MSG#{mid}") == keys.TURN
        assert keys.record_kind(keys.list_key(A, keys.now(), mid)["sk"]) == keys.LIST_ROW
        assert [keys.record_kind(s) for s in ("SUM#1", "MEM#1", "VEC#1", "MSG#x", "SES#bad", "other")] == [
            keys.SUMMARY,
            keys.MEMORY,
            keys.VECTOR,
            keys.UNKNOWN,
            keys.UNKNOWN,
            keys.UNKNOWN,
        ]


class TestUnknownOutcome:
    """A committed question whose response was lost is reported as sent, and continues; an uncommitted one is not."""

    @staticmethod
    def _lose_response(client, operation: str, *, after_commit: bool):
        """Make the next `operation` raise a read timeout, after (or instead of) reaching the server."""
        from botocore.exceptions import ReadTimeoutError

        state = {"armed": True}

        def before_send(request, **_):
            if not after_commit:  # every attempt botocore makes times out
                raise ReadTimeoutError(endpoint_url=request.url)

        def after_call(**_):
            if state["armed"] and after_commit:
                state["armed"] = False
                raise ReadTimeoutError(endpoint_url="local")

        client.meta.events.register(f"before-send.dynamodb.{operation}", before_send)
        client.meta.events.register(f"after-call.dynamodb.{operation}", after_call)

    def test_a_send_committed_before_its_response_was_lost_is_reported_as_sent(self, store, client, table, requests):
        session, _ = store.create_session(A, "first", system_prompt_id=PROMPT)
        self._lose_response(client, "TransactWriteItems", after_commit=True)
        requests.reset()
        sent, message = store.send_message(A, session, "second", system_prompt_id=PROMPT)
        assert requests.names == ["TransactWriteItems", "GetItem"]  # one consistent read to learn the outcome
        assert [m.input_body for m in store.open_session(A, session.session_id).messages] == ["first", "second"]
        assert sent.message_count == 2 and message.status == PENDING
        assert_invariants(client, table, A)

    def test_a_new_chat_committed_before_its_response_was_lost_is_reported_as_created(self, store, client, table):
        self._lose_response(client, "TransactWriteItems", after_commit=True)
        session, message = store.create_session(A, "hello", system_prompt_id=PROMPT)
        assert store.open_session(A, session.session_id).messages[0].message_id == message.message_id

    def test_a_send_that_never_reached_the_table_says_it_was_not_saved(self, store, client, table, no_backoff_sleep):
        session, _ = store.create_session(A, "first", system_prompt_id=PROMPT)
        self._lose_response(client, "TransactWriteItems", after_commit=False)
        with pytest.raises(StoreUnavailable, match="was not saved"):
            store.send_message(A, session, "second", system_prompt_id=PROMPT)
        assert [m.input_body for m in store.open_session(A, session.session_id).messages] == ["first"]
        assert_invariants(client, table, A)

    def test_a_resent_transaction_that_had_committed_is_not_an_error(self, store, client, table):
        """botocore resends after a lost response; the resend is cancelled because our message exists."""
        session, _ = store.create_session(A, "first", system_prompt_id=PROMPT)
        state = {"first": True}

        def resend_once(response, **_):
            if state["first"] and response is not None and response[0].status_code == 200:
                state["first"] = False
                return 0  # retry now: the same request again, as after a lost response
            return None

        client.meta.events.register("needs-retry.dynamodb.TransactWriteItems", resend_once)
        _sent, _message = store.send_message(A, session, "second", system_prompt_id=PROMPT)
        assert not state["first"]
        assert [m.input_body for m in store.open_session(A, session.session_id).messages] == ["first", "second"]
        assert_invariants(client, table, A)


class TestStorableText:
    def test_a_lone_surrogate_in_an_answer_is_replaced_not_a_lost_turn(self, store):
        session, message = store.create_session(A, "q \ud83d", system_prompt_id=PROMPT)
        done = finish(store, A, message, "broken \udc00 pair, whole 👋")
        stored = store.open_session(A, session.session_id).messages[0]
        assert stored.status == DONE and stored.output_body == "broken \ufffd pair, whole 👋"
        assert stored.input_body == "q \ufffd" and done.output_body == stored.output_body


class TestSummaryInTheOpenQuery:
    def test_a_summary_takes_one_turns_slot_so_the_open_stays_limit_21_and_paging_reaches_every_turn(
        self, store, client, table, requests
    ):
        session, first = store.create_session(A, "turn 0", system_prompt_id=PROMPT)
        ids = [first.message_id]
        for n in range(1, 30):
            session, message = store.send_message(A, session, f"turn {n}", system_prompt_id=PROMPT)
            ids.append(message.message_id)
        client.put_item(
            TableName=table,
            Item=to_item(
                {
                    **keys.summary_key(A, session.session_id),
                    "session_id": session.session_id,
                    "text": "so far...",
                    "version": 1,
                    "covered_until": ids[5],
                    "covered_turns": 6,
                }
            ),
        )
        requests.reset()
        view = store.open_session(A, session.session_id)
        assert requests.calls[0][1]["Limit"] == 21
        assert view.summary.text == "so far..." and len(view.messages) == 19
        loaded = [m.message_id for m in view.messages]
        while view.cursor:
            view = store.open_session(A, session.session_id, cursor=view.cursor)
            loaded = [m.message_id for m in view.messages] + loaded
        assert loaded == ids


class TestRenameCancellations:
    """Only a transaction cancelled by the session changing (a failed condition, a conflict) is another tab's race."""

    @pytest.fixture
    def faults(self, client, no_backoff_sleep):
        from tests.faults import Faults

        return Faults(client)

    @staticmethod
    def cancelled(*codes: str, message: str = "") -> dict:
        return {
            "CancellationReasons": [
                {"Code": c, **({"Message": message} if c != "None" and message else {})} for c in codes
            ]
        }

    def test_a_validation_error_is_raised_as_itself_not_retried_or_blamed_on_another_tab(self, store, faults, requests):
        from botocore.exceptions import ClientError

        session, _ = store.create_session(A, "q", system_prompt_id=PROMPT)
        faults.fail(
            "TransactWriteItems",
            "TransactionCanceledException",
            **self.cancelled("ValidationError", "None", message="One or more parameter values were invalid"),
        )
        requests.reset()
        with pytest.raises(ClientError) as raised:
            store.rename_session(A, session, "New name")
        assert raised.value.response["Error"]["Code"] == "TransactionCanceledException"  # as DynamoDB said it
        assert requests.names == ["TransactWriteItems"]  # no re-read, no second attempt
        assert store.list_sessions(A).items[0].title == "q"

    def test_a_throttled_cancellation_says_the_database_is_busy(self, store, faults, requests):
        session, _ = store.create_session(A, "q", system_prompt_id=PROMPT)
        faults.fail("TransactWriteItems", "TransactionCanceledException", **self.cancelled("None", "ThrottlingError"))
        requests.reset()
        with pytest.raises(StoreUnavailable, match="busy") as raised:
            store.rename_session(A, session, "New name")
        assert "another tab" not in str(raised.value) and requests.names == ["TransactWriteItems"]

    def test_an_item_size_cancellation_is_item_too_large(self, store, faults):
        from lib.errors import ItemTooLarge

        session, _ = store.create_session(A, "q", system_prompt_id=PROMPT)
        faults.fail(
            "TransactWriteItems",
            "TransactionCanceledException",
            **self.cancelled("ValidationError", "None", message="Item size has exceeded the maximum allowed size"),
        )
        with pytest.raises(ItemTooLarge):
            store.rename_session(A, session, "New name")

    def test_conditions_failing_on_every_attempt_are_another_tab(self, store, faults, requests):
        session, _ = store.create_session(A, "q", system_prompt_id=PROMPT)
        faults.fail(
            "TransactWriteItems",
            "TransactionCanceledException",
            times=4,
            **self.cancelled("ConditionalCheckFailed", "None"),
        )
        requests.reset()
        with pytest.raises(SessionChanged, match="another tab"):
            store.rename_session(A, session, "New name")
        assert requests.names == ["TransactWriteItems", "GetItem"] * 3 + ["TransactWriteItems"]
