"""Versions of a turn on a real table: Regenerate and Edit keep every earlier answer, switching versions copies
the chosen one into the turn, no page read meets a version record, and two tabs at once leave one result."""

import threading

import pytest

from lib.errors import EmptyMessage, MessageTooLarge, VersionChanged
from lib.storage import keys
from lib.storage.records import DONE, FAILED, PENDING
from lib.storage.versions import MAX_VERSIONS

U = "vera@example.com"


def finish(store, message, text):
    return store.finish_message(
        U,
        message,
        output_body=text,
        input_token=3,
        output_token=5,
        response_start_time=message.create_time,
        response_end_time=keys.now(),
        model="demo",
        context=[{"kind": "system", "tokens": 9}, {"kind": "question", "tokens": 2}],
    )


@pytest.fixture
def turn(store):
    session, message = store.create_session(U, "What is DynamoDB?", system_prompt_id="p")
    return session, finish(store, message, "first answer")


class TestRegenerate:
    def test_a_new_version_keeps_the_old_answer_and_is_answered_in_place(self, store, turn, requests):
        session, done = turn
        requests.reset()
        pending = store.versions.regenerate(U, done)
        assert requests.names == ["TransactWriteItems"]  # the kept version and the turn, together
        assert (pending.status, pending.version, pending.versions, pending.output_body) == (PENDING, 2, 2, "")
        assert pending.input_body == "What is DynamoDB?" and pending.kept == {1}
        second = finish(store, pending, "second answer")
        view = store.open_session(U, session.session_id)
        (shown,) = view.messages
        assert (shown.output_body, shown.version, shown.versions) == ("second answer", 2, 2)
        (kept,) = store.versions.versions(U, shown)
        assert (kept.version, kept.output_body, kept.status, kept.input_token) == (1, "first answer", DONE, 3)
        assert second.message_id == done.message_id  # one turn, not a second one

    def test_switching_back_and_forth_needs_no_second_copy(self, store, turn, requests):
        session, done = turn
        second = finish(store, store.versions.regenerate(U, done), "second answer")
        requests.reset()
        first = store.versions.flip(U, second, 1)
        assert requests.names == ["GetItem", "TransactWriteItems"]  # version 2 is kept as it leaves
        assert (first.output_body, first.version, first.kept) == ("first answer", 1, {1, 2})
        assert store.open_session(U, session.session_id).messages[0] == first
        requests.reset()
        again = store.versions.flip(U, first, 2)
        assert requests.names == ["GetItem", "UpdateItem"]  # both already kept
        assert (again.output_body, again.version) == ("second answer", 2)
        assert store.open_session(U, session.session_id).messages[0].output_body == "second answer"

    def test_an_edit_is_a_new_version_with_the_new_question(self, store, turn):
        session, done = turn
        edited = store.versions.regenerate(U, done, question="What is Amazon DynamoDB, in one line?")
        assert edited.input_body == "What is Amazon DynamoDB, in one line?" and edited.status == PENDING
        finish(store, edited, "a key-value database")
        (kept,) = store.versions.versions(U, store.open_session(U, session.session_id).messages[0])
        assert kept.input_body == "What is DynamoDB?" and kept.output_body == "first answer"

    @pytest.mark.parametrize(
        "question, error", [("   ", EmptyMessage), ("x" * 410_000, MessageTooLarge)], ids=["empty", "oversize"]
    )
    def test_an_empty_or_oversize_edit_is_refused_and_changes_nothing(self, store, turn, question, error):
        session, done = turn
        with pytest.raises(error):
            store.versions.regenerate(U, done, question=question)
        assert store.open_session(U, session.session_id).messages[0] == done

    def test_a_stopped_answer_is_kept_too(self, store):
        session, message = store.create_session(U, "long one", system_prompt_id="p")
        stopped = store.fail_message(U, message, output_body="partial", error="Stopped before the answer was complete.")
        pending = store.versions.regenerate(U, stopped)
        (kept,) = store.versions.versions(U, pending)
        assert (kept.status, kept.output_body, kept.error) == (
            FAILED,
            "partial",
            "Stopped before the answer was complete.",
        )

    def test_an_answer_still_being_written_is_not_regenerated(self, store):
        _, pending = store.create_session(U, "q", system_prompt_id="p")
        with pytest.raises(VersionChanged, match="still being written"):
            store.versions.regenerate(U, pending)

    def test_a_forged_message_id_creates_nothing(self, store, turn, client, table):
        from dataclasses import replace

        session, done = turn
        forged = replace(done, message_id=keys.new_id())
        with pytest.raises(VersionChanged):
            store.versions.regenerate(U, forged)
        items = client.query(
            TableName=table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": keys.session_pk(U, session.session_id)}},
        )["Items"]
        assert {i["sk"]["S"] for i in items} == {"SES#META", f"MSG#{done.message_id}"}

    def test_a_turn_keeps_at_most_the_stated_versions(self, store, turn):
        from dataclasses import replace

        _, done = turn
        with pytest.raises(VersionChanged, match=str(MAX_VERSIONS)):
            store.versions.regenerate(U, replace(done, versions=MAX_VERSIONS, version=MAX_VERSIONS))


class TestOpeningAChatWithVersions:
    def test_the_open_query_never_reads_a_version_record(self, store, meter, turn):
        session, done = turn
        for n in range(3):
            done = finish(store, store.versions.regenerate(U, done), f"answer {n + 2} " + "x" * 3000)
        meter.clear()
        view = store.open_session(U, session.session_id)
        (record,) = meter.records()
        assert len(view.messages) == 1 and view.messages[0].versions == 4
        assert record.units == 1  # the meta and one 3 KB turn; the three kept versions are not read


class TestTwoTabsAtOnce:
    def test_two_regenerates_of_one_turn_leave_one_new_version(self, store, turn):
        session, done = turn
        barrier, outcomes = threading.Barrier(2), []

        def tab():
            barrier.wait()
            try:
                outcomes.append(store.versions.regenerate(U, done).version)
            except VersionChanged:
                outcomes.append("refused")

        threads = [threading.Thread(target=tab) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes, key=str) == [2, "refused"]
        shown = store.open_session(U, session.session_id).messages[0]
        assert (shown.versions, shown.version) == (2, 2) and len(store.versions.versions(U, shown)) == 1

    def test_two_tabs_switching_versions_leave_one_consistent_choice(self, store, turn):
        session, done = turn
        second = finish(store, store.versions.regenerate(U, done), "second answer")
        third = finish(store, store.versions.regenerate(U, second), "third answer")
        barrier, outcomes = threading.Barrier(2), []

        def tab(version):
            barrier.wait()
            try:
                outcomes.append(store.versions.flip(U, third, version).version)
            except VersionChanged:
                outcomes.append("refused")

        threads = [threading.Thread(target=tab, args=(v,)) for v in (1, 2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert outcomes.count("refused") == 1
        (chosen,) = [o for o in outcomes if o != "refused"]
        shown = store.open_session(U, session.session_id).messages[0]
        assert shown.version == chosen and shown.output_body == ("first answer", "second answer")[chosen - 1]
        assert {v.version for v in store.versions.versions(U, shown)} == {1, 2, 3}  # nothing lost
