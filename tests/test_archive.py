"""The cold tier (docs/archive.md): an old chat moved to one gzip object and back, in an order that no crash, race
or failing store can make lose or duplicate a turn. Real moto tables and moto's S3 server; faults injected with
real failing S3 endpoints and by stopping after a step (lib.storage.archive.after_step) and running again."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import threading

import pytest

from lib import aws
from lib.errors import ArchiveUnavailable, ObjectStoreUnavailable
from lib.ops.archive import archive_old_chats
from lib.storage import archive as archive_module
from lib.storage import keys
from lib.storage.archive import ARCHIVED, CHANGED, RESUMED, read_document
from lib.storage.objects import S3Objects
from lib.storage.store import ChatStore
from tests.objects_helpers import FailingS3, ObjectCalls, bucket, failing, s3_client, s3_server, store_with  # noqa: F401

ALICE = "alice@example.com"
BOB = "bob@example.com"
OLD = dt.datetime(2026, 1, 5, 9, 0, tzinfo=dt.UTC)
NOW = dt.datetime(2026, 6, 1, 9, 0, tzinfo=dt.UTC)


class Crash(BaseException):
    """A process stopped (kill -9) after a step: nothing after it runs, nothing is cleaned up."""


@pytest.fixture
def s3(bucket):
    client, name = bucket
    return S3Objects(client, name)


@pytest.fixture
def cold(client, table, meter, s3) -> ChatStore:
    return store_with(client, table, meter, s3)


def old_chat(store: ChatStore, user: str = ALICE, turns: int = 3, *, at: dt.datetime = OLD) -> str:
    """A chat of `turns` answered turns, all written at `at` (the past)."""
    moments = iter(at + dt.timedelta(seconds=i) for i in range(1000))
    with keys.clock(lambda: next(moments)):
        session, message = store.create_session(user, "question 0", system_prompt_id="p")
        for n in range(turns):
            if n:
                session, message = store.send_message(user, session, f"question {n}", system_prompt_id="p")
            store.finish_message(
                user,
                message,
                output_body=f"answer {n}",
                input_token=1,
                output_token=2,
                response_start_time=keys.now(),
                response_end_time=keys.now(),
            )
    return session.session_id


def partition(client, table, user, session_id) -> list[dict]:
    return client.query(
        TableName=table,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": keys.session_pk(user, session_id)}},
        ConsistentRead=True,
    )["Items"]


def snapshot(items: list[dict]) -> list[str]:
    """The items, order and attribute order aside: what a restore must give back exactly."""
    return sorted(json.dumps(i, sort_keys=True, default=str) for i in items)


def meta_of(client, table, user, session_id) -> dict:
    key = keys.meta_key(user, session_id)
    return client.get_item(TableName=table, Key={k: {"S": v} for k, v in key.items()}, ConsistentRead=True)["Item"]


def archive_keys(s3: S3Objects, user: str = ALICE) -> list[str]:
    return [o.key for page in s3.list_pages(f"{keys.user_object_prefix(user)}archive/") for o in page]


def texts(store: ChatStore, session_id: str, user: str = ALICE) -> list[tuple[str, str]]:
    return [(m.input_body, m.output_body) for m in store.open_session(user, session_id).messages]


def run_archive(store: ChatStore, user: str = ALICE, days: float = 30):
    return archive_old_chats(store.archive, [user], days, now=NOW)


@pytest.fixture
def crash_after(monkeypatch):
    """Stop the process right after the named step (its n-th time), as kill -9 would."""

    def arm(step: str, nth: int = 1):
        seen = []

        def hook(name: str) -> None:
            if name == step:
                seen.append(name)
                if len(seen) == nth:
                    raise Crash(step)

        monkeypatch.setattr(archive_module, "after_step", hook)

    yield arm


class Split:
    """An S3 backend whose PutObjects (or GetObjects) go to a failing endpoint and everything else to moto."""

    def __init__(self, good: S3Objects, bad: S3Objects, *, fail: str):
        self.good, self.bad, self.fail, self.where = good, bad, fail, good.where

    def put_bytes(self, key, data, *, sha256):
        return (self.bad if self.fail == "put" else self.good).put_bytes(key, data, sha256=sha256)

    def get_bytes(self, key):
        return (self.bad if self.fail == "get" else self.good).get_bytes(key)

    def delete_key(self, key):
        return self.good.delete_key(key)

    def list_pages(self, prefix):
        return self.good.list_pages(prefix)


# --- bad input first ---------------------------------------------------------------------------------------------


class TestBadInput:
    def test_days_must_be_a_positive_number(self, cold):
        for days in (0, -3, float("nan")):
            with pytest.raises(ValueError, match="positive"):
                archive_old_chats(cold.archive, [ALICE], days, now=NOW)

    def test_without_an_object_store_nothing_is_archived(self, store, client, table):
        session_id = old_chat(store)
        with pytest.raises(ArchiveUnavailable, match="No object store"):
            store.archive.archive_chat(ALICE, session_id, "whatever")
        assert len(partition(client, table, ALICE, session_id)) == 4

    def test_the_command_refuses_a_user_id_that_could_reach_into_another_key(self, capsys):
        from lib.admin import main

        assert main(["archive", "--days", "30", "--user", "bob@example.com#SES#x"]) == 2
        assert "--user" in capsys.readouterr().err

    @pytest.mark.parametrize(
        "forged",
        [
            "users/YWxpY2VAZXhhbXBsZS5jb20/archive/../../etc",
            "users/YWxpY2VAZXhhbXBsZS5jb20/bodies/01J00000000000000000000000/x",
            "archive/01J00000000000000000000000/01J00000000000000000000000",
            "",
        ],
    )
    def test_a_forged_archive_key_is_refused(self, forged):
        with pytest.raises(ValueError):
            keys.archive_object_parts(forged)

    def test_a_meta_pointing_at_another_users_archive_is_never_read(self, cold, client, table, s3):
        alice_chat, bob_chat = old_chat(cold, ALICE), old_chat(cold, BOB)
        run_archive(cold, BOB)
        bob_pointer = meta_of(client, table, BOB, bob_chat)["archive"]
        run_archive(cold, ALICE)
        key = keys.meta_key(ALICE, alice_chat)
        client.update_item(
            TableName=table,
            Key={k: {"S": v} for k, v in key.items()},
            UpdateExpression="SET #a = :p",
            ExpressionAttributeNames={"#a": "archive"},
            ExpressionAttributeValues={":p": bob_pointer},
        )
        with pytest.raises(ArchiveUnavailable, match="not this chat's"):
            cold.open_session(ALICE, alice_chat)
        assert "archive" in meta_of(client, table, ALICE, alice_chat)
        assert len(archive_keys(s3, BOB)) == 1  # Bob's archive untouched


# --- the round trip ----------------------------------------------------------------------------------------------


class TestArchiveAndRestore:
    def test_an_old_chat_becomes_one_verified_object_and_only_its_meta_stays(self, cold, client, table, s3):
        session_id = old_chat(cold, turns=3)
        recent = old_chat(cold, at=NOW - dt.timedelta(days=2))
        before = texts(cold, session_id)
        report = run_archive(cold)
        assert [(o.session_id, o.outcome, o.items, o.turns) for _, o in report.outcomes] == [
            (session_id, ARCHIVED, 3, 3)
        ]
        assert [i["sk"]["S"] for i in partition(client, table, ALICE, session_id)] == [keys.META_SK]
        assert len(partition(client, table, ALICE, recent)) == 4  # two days old: left alone
        (key,) = archive_keys(s3)
        pointer = meta_of(client, table, ALICE, session_id)["archive"]["M"]
        assert pointer["key"]["S"] == key
        data = s3.get_bytes(key)
        import hashlib

        assert (int(pointer["size"]["N"]), pointer["sha256"]["S"]) == (len(data), hashlib.sha256(data).hexdigest())
        document = read_document(data)
        assert [i["sk"]["S"][:4] for i in document["items"]] == ["MSG#"] * 3
        assert [r.session_id for r in cold.list_sessions(ALICE).items] == [recent, session_id]  # row stays
        assert texts(cold, session_id) == before  # opening restores it

    def test_opening_restores_every_item_and_deletes_the_object(self, cold, client, table, s3):
        session_id = old_chat(cold, turns=4)
        before = snapshot(partition(client, table, ALICE, session_id))
        run_archive(cold)
        view = cold.open_session(ALICE, session_id)
        assert [m.output_body for m in view.messages] == ["answer 0", "answer 1", "answer 2", "answer 3"]
        assert view.session.archive is None
        assert snapshot(partition(client, table, ALICE, session_id)) == before  # byte for byte
        assert archive_keys(s3) == []

    def test_kept_versions_and_the_running_summary_come_back_too(self, cold, client, table):
        session_id = old_chat(cold, turns=2)
        pk = keys.session_pk(ALICE, session_id)
        for sk in ("SUM#RUNNING", f"ALT#{keys.new_id()}#001"):
            client.put_item(TableName=table, Item={"pk": {"S": pk}, "sk": {"S": sk}, "text": {"S": "kept"}})
        before = snapshot(partition(client, table, ALICE, session_id))
        outcome = run_archive(cold).outcomes[0][1]
        assert (outcome.items, outcome.turns) == (4, 2)
        cold.open_session(ALICE, session_id)
        assert snapshot(partition(client, table, ALICE, session_id)) == before

    def test_its_search_vectors_and_sidebar_row_stay_in_the_table(self, cold, client, table):
        session_id = old_chat(cold, turns=2)
        turn = cold.open_session(ALICE, session_id).messages[0]
        vector = keys.vector_key(ALICE, session_id, turn.message_id)
        client.put_item(
            TableName=table, Item={"pk": {"S": vector["pk"]}, "sk": {"S": vector["sk"]}, "embed_model": {"S": "m"}}
        )
        run_archive(cold)
        found = client.get_item(TableName=table, Key={k: {"S": v} for k, v in vector.items()}, ConsistentRead=True)
        assert "Item" in found  # search still finds the chat; opening the result restores it
        assert cold.titles(ALICE, [session_id]) == {session_id: "question 0"}

    def test_a_pinned_chat_is_kept_live(self, cold, client, table):
        session_id = old_chat(cold)
        cold.set_pinned(ALICE, cold.get_session(ALICE, session_id), True)
        assert run_archive(cold).outcomes == []
        assert len(partition(client, table, ALICE, session_id)) == 4

    def test_a_send_to_an_archived_chat_restores_it_first(self, cold, client, table):
        session_id = old_chat(cold, turns=2)
        stale = cold.get_session(ALICE, session_id)  # a tab that showed the chat before it was archived
        run_archive(cold)
        sent, message = cold.send_message(ALICE, stale, "again", system_prompt_id="p")
        assert sent.archive is None and sent.message_count == 3
        assert [m.input_body for m in cold.open_session(ALICE, session_id).messages] == [
            "question 0",
            "question 1",
            "again",
        ]
        assert "archive" not in meta_of(client, table, ALICE, session_id)

    def test_two_tabs_opening_an_archived_chat_at_once_see_one_consistent_chat(self, cold, client, table, s3):
        session_id = old_chat(cold, turns=5)
        before = snapshot(partition(client, table, ALICE, session_id))
        run_archive(cold)
        results, errors, start = [], [], threading.Barrier(2)

        def tab():
            start.wait()
            try:
                results.append([m.message_id for m in cold.open_session(ALICE, session_id).messages])
            except Exception as exc:  # noqa: BLE001 - the assertion below shows it
                errors.append(exc)

        threads = [threading.Thread(target=tab) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert len(results) == 2 and results[0] == results[1] and len(results[0]) == 5
        assert snapshot(partition(client, table, ALICE, session_id)) == before
        assert archive_keys(s3) == []

    def test_archive_restore_and_archive_again_use_a_fresh_object(self, cold, s3):
        session_id = old_chat(cold)
        run_archive(cold)
        first = archive_keys(s3)
        cold.open_session(ALICE, session_id)
        run_archive(cold)
        second = archive_keys(s3)
        assert len(second) == 1 and second != first
        assert texts(cold, session_id)[-1] == ("question 2", "answer 2")


# --- faults ------------------------------------------------------------------------------------------------------


class TestObjectStoreFaults:
    @pytest.mark.parametrize(("status", "code"), [(403, "AccessDenied"), (503, "SlowDown"), (500, "InternalError")])
    def test_a_refused_or_failing_put_archives_nothing_and_deletes_nothing(
        self, client, table, meter, s3, failing, no_backoff_sleep, status, code
    ):
        bad = S3Objects(s3_client(failing(status, code).url, aws.deadlines(connect_s=1, read_s=2, attempts=2)), "b")
        store = store_with(client, table, meter, Split(s3, bad, fail="put"))
        session_id = old_chat(store)
        report = run_archive(store)
        assert [(s, "nothing" in why or "refused" in why or "busy" in why) for _, s, why in report.failed] == [
            (session_id, True)
        ]
        assert len(partition(client, table, ALICE, session_id)) == 4
        assert "archive" not in meta_of(client, table, ALICE, session_id)

    def test_a_failing_read_back_deletes_nothing_and_removes_its_object(
        self, client, table, meter, s3, failing, no_backoff_sleep
    ):
        bad = S3Objects(s3_client(failing(503, "SlowDown").url, aws.deadlines(connect_s=1, read_s=2, attempts=2)), "b")
        store = store_with(client, table, meter, Split(s3, bad, fail="get"))
        session_id = old_chat(store)
        report = run_archive(store)
        assert [s for _, s, _ in report.failed] == [session_id]
        assert len(partition(client, table, ALICE, session_id)) == 4
        assert archive_keys(s3) == []

    def test_a_restore_while_the_store_fails_changes_nothing_and_works_later(
        self, client, table, meter, s3, failing, no_backoff_sleep
    ):
        session_id = old_chat(store_with(client, table, meter, s3))
        run_archive(store_with(client, table, meter, s3))
        bad = S3Objects(s3_client(failing(503, "SlowDown").url, aws.deadlines(connect_s=1, read_s=2, attempts=2)), "b")
        with pytest.raises(ObjectStoreUnavailable):
            store_with(client, table, meter, Split(s3, bad, fail="get")).open_session(ALICE, session_id)
        assert [i["sk"]["S"] for i in partition(client, table, ALICE, session_id)] == [keys.META_SK]
        assert len(texts(store_with(client, table, meter, s3), session_id)) == 3

    def test_a_corrupt_object_is_reported_and_the_chat_stays_archived(self, cold, client, table, s3):
        session_id = old_chat(cold)
        run_archive(cold)
        (key,) = archive_keys(s3)
        s3.put_bytes(key, gzip.compress(b'{"format": "chat-archive/1", "items": []}'), sha256="0" * 64)
        with pytest.raises(ArchiveUnavailable, match="damaged .*checksum"):
            cold.open_session(ALICE, session_id)
        with pytest.raises(ArchiveUnavailable, match="archived"):
            cold.send_message(ALICE, cold.get_session(ALICE, session_id), "hello?", system_prompt_id="p")
        assert "archive" in meta_of(client, table, ALICE, session_id)
        assert [i["sk"]["S"] for i in partition(client, table, ALICE, session_id)] == [keys.META_SK]
        assert archive_keys(s3) == [key]  # nothing deleted

    def test_a_missing_object_is_reported_never_an_empty_chat(self, cold, client, table, s3):
        session_id = old_chat(cold)
        run_archive(cold)
        s3.delete_key(archive_keys(s3)[0])
        with pytest.raises(ArchiveUnavailable, match="missing"):
            cold.open_session(ALICE, session_id)
        assert "archive" in meta_of(client, table, ALICE, session_id)


class TestCrashes:
    @pytest.mark.parametrize("step", ["put", "verify"])
    def test_a_crash_before_the_mark_leaves_the_chat_live_and_an_orphan(
        self, cold, client, table, s3, crash_after, step
    ):
        session_id = old_chat(cold)
        crash_after(step)
        with pytest.raises(Crash):
            run_archive(cold)
        assert len(partition(client, table, ALICE, session_id)) == 4
        assert "archive" not in meta_of(client, table, ALICE, session_id)
        orphan = archive_keys(s3)
        assert len(orphan) == 1
        found = cold.archive.check_objects(
            [ALICE], now=dt.datetime.now(dt.UTC) + dt.timedelta(hours=2), grace=dt.timedelta(hours=1)
        )
        assert [o.key for o in found.orphans] == orphan
        archive_module.after_step = archive_module._no_crash
        assert [o.outcome for _, o in run_archive(cold).outcomes] == [ARCHIVED]  # the rerun archives it afresh
        assert cold.archive.remove_orphans(found.orphans) == 1
        assert len(archive_keys(s3)) == 1
        assert len(texts(cold, session_id)) == 3

    @pytest.mark.parametrize(("step", "nth"), [("mark", 1), ("delete", 1), ("delete", 2)])
    def test_a_crash_after_the_mark_is_finished_by_the_rerun(
        self, cold, client, table, s3, crash_after, monkeypatch, step, nth
    ):
        monkeypatch.setattr(archive_module, "TRANSACTION_ITEMS", 2)  # three transactions for five turns
        session_id = old_chat(cold, turns=5)
        before = snapshot(partition(client, table, ALICE, session_id))
        crash_after(step, nth)
        with pytest.raises(Crash):
            run_archive(cold)
        assert "archive" in meta_of(client, table, ALICE, session_id)
        monkeypatch.setattr(archive_module, "after_step", archive_module._no_crash)
        assert [o.outcome for _, o in run_archive(cold).outcomes] == [RESUMED]
        assert [i["sk"]["S"] for i in partition(client, table, ALICE, session_id)] == [keys.META_SK]
        assert len(archive_keys(s3)) == 1
        cold.open_session(ALICE, session_id)
        assert snapshot(partition(client, table, ALICE, session_id)) == before

    @pytest.mark.parametrize(("step", "nth"), [("read", 1), ("put", 1), ("clear", 1)])
    def test_a_crash_during_a_restore_is_resumed_by_the_next_open(
        self, cold, client, table, s3, crash_after, monkeypatch, step, nth
    ):
        monkeypatch.setattr(archive_module, "TRANSACTION_ITEMS", 2)
        session_id = old_chat(cold, turns=5)
        before = snapshot(partition(client, table, ALICE, session_id))
        run_archive(cold)
        crash_after(step, nth)
        with pytest.raises(Crash):
            cold.open_session(ALICE, session_id)
        monkeypatch.setattr(archive_module, "after_step", archive_module._no_crash)
        assert len(cold.open_session(ALICE, session_id).messages) == 5
        assert snapshot(partition(client, table, ALICE, session_id)) == before
        if step == "clear":  # the mark was cleared, the object not yet deleted: an orphan for repair
            found = cold.archive.check_objects(
                [ALICE], now=dt.datetime.now(dt.UTC) + dt.timedelta(hours=2), grace=dt.timedelta(hours=1)
            )
            assert cold.archive.remove_orphans(found.orphans) == 1
        assert archive_keys(s3) == []

    def test_a_crash_in_the_middle_of_putting_back_never_duplicates_a_turn(
        self, cold, client, table, crash_after, monkeypatch
    ):
        monkeypatch.setattr(archive_module, "TRANSACTION_ITEMS", 2)
        session_id = old_chat(cold, turns=5)
        run_archive(cold)
        original = archive_module.ArchiveStore._put_back
        calls = []

        def put_back_then_die(self, user_id, session, batch):
            calls.append(1)
            result = original(self, user_id, session, batch)
            if len(calls) == 2:
                raise Crash("put")
            return result

        monkeypatch.setattr(archive_module.ArchiveStore, "_put_back", put_back_then_die)
        with pytest.raises(Crash):
            cold.open_session(ALICE, session_id)
        assert len(partition(client, table, ALICE, session_id)) == 1 + 4  # two batches back, the chat still archived
        monkeypatch.setattr(archive_module.ArchiveStore, "_put_back", original)
        view = cold.open_session(ALICE, session_id)
        assert [m.input_body for m in view.messages] == [f"question {n}" for n in range(5)]
        assert view.session.message_count == 5


class TestRaces:
    def test_a_send_between_the_read_and_the_mark_skips_the_archive_and_deletes_nothing(
        self, cold, client, table, s3, monkeypatch
    ):
        session_id = old_chat(cold)

        def send_meanwhile(step):
            if step == "verify":
                cold.send_message(ALICE, cold.get_session(ALICE, session_id), "still here", system_prompt_id="p")

        monkeypatch.setattr(archive_module, "after_step", send_meanwhile)
        assert [o.outcome for _, o in run_archive(cold).outcomes] == [CHANGED]
        assert len(partition(client, table, ALICE, session_id)) == 5
        assert "archive" not in meta_of(client, table, ALICE, session_id)
        assert archive_keys(s3) == []  # its object went with it

    def test_an_answer_rated_while_it_is_being_deleted_is_kept(self, cold, client, table, s3, monkeypatch):
        session_id = old_chat(cold, turns=3)
        first = cold.open_session(ALICE, session_id).messages[0]

        def rate_meanwhile(step):
            if step == "mark":
                cold.set_feedback(ALICE, first, 1)

        monkeypatch.setattr(archive_module, "after_step", rate_meanwhile)
        outcome = run_archive(cold).outcomes[0][1]
        assert outcome.outcome == archive_module.UNDONE
        assert "archive" not in meta_of(client, table, ALICE, session_id)
        assert cold.open_session(ALICE, session_id).messages[0].feedback == 1
        assert len(partition(client, table, ALICE, session_id)) == 4
        assert archive_keys(s3) == []


class TestRequestBudget:
    def test_archiving_a_three_turn_chat(self, cold, requests, meter):
        session_id = old_chat(cold, turns=3)
        requests.reset()
        calls = ObjectCalls(meter)
        start = len(meter.records())
        run_archive(cold)
        assert requests.names == ["Query", "Query", "UpdateItem", "TransactWriteItems"]  # candidates, partition
        assert calls.names == ["PutObject", "GetObject"]
        used = [u for u in meter.records()[start:] if u.kind != "object"]
        assert {u.action for u in meter.records()[start:]} == {"archive"}
        assert [(u.operation, u.units) for u in used] == [
            ("Query", 1.0),  # the sidebar rows' time range (consistent)
            ("Query", 1.0),  # the chat's partition: meta and three ~500-byte turns
            ("UpdateItem", 1.0),
            ("TransactWriteItems", 8.0),  # the meta's ConditionCheck and three Deletes, 2 WRU each (transactional)
        ]
        assert session_id

    def test_opening_an_archived_three_turn_chat(self, cold, requests, meter):
        session_id = old_chat(cold, turns=3)
        run_archive(cold)
        requests.reset()
        calls = ObjectCalls(meter)
        start = len(meter.records())
        cold.open_session(ALICE, session_id)
        assert requests.names == ["Query", "UpdateItem", "TransactWriteItems", "UpdateItem", "Query"]
        assert calls.names == ["GetObject", "DeleteObject"]
        used = [(u.operation, u.action, u.units) for u in meter.records()[start:] if u.kind != "object"]
        assert used == [
            ("Query", "open", 1.0),
            ("UpdateItem", "restore", 1.0),  # the pointer flagged "restoring": no deletion of an archive commits now
            ("TransactWriteItems", "restore", 8.0),
            ("UpdateItem", "restore", 1.0),
            ("Query", "open", 1.0),
        ]


# --- a restore and an archive at the same time -----------------------------------------------------------------


class TestRestoreWhileArchiving:
    """A restore that overlaps an archive's step 4 (a rerun after a crash, or the same run) must never let the
    archive delete what the restore leaves in place: the restore flags the meta before its Puts, and step 4's
    ConditionCheck holds only while no restore is flagged."""

    def test_an_open_while_the_same_run_deletes_keeps_every_turn(self, cold, client, table, s3, monkeypatch):
        session_id = old_chat(cold, turns=3)
        before = snapshot(partition(client, table, ALICE, session_id))
        marked, restored_puts, archived = threading.Event(), threading.Event(), threading.Event()
        results, errors = [], []

        def hook(step: str) -> None:
            if threading.current_thread() is archiver:
                if step == "mark":  # meta marked, every item still there: let the open's Puts run now
                    marked.set()
                    assert restored_puts.wait(300)
            elif step == "put":  # the open put back (nothing: every item exists) and has not cleared the mark
                restored_puts.set()
                assert archived.wait(300)  # the archive's step 4 runs here

        def archive():
            try:
                results.extend(o for _, o in run_archive(cold).outcomes)
            except BaseException as exc:  # noqa: BLE001 - the assertion below shows it
                errors.append(exc)
            finally:
                archived.set()

        monkeypatch.setattr(archive_module, "after_step", hook)
        archiver = threading.Thread(target=archive)
        archiver.start()
        assert marked.wait(300)
        view = cold.open_session(ALICE, session_id)
        archiver.join()
        assert errors == []
        assert [m.output_body for m in view.messages] == ["answer 0", "answer 1", "answer 2"]
        assert snapshot(partition(client, table, ALICE, session_id)) == before
        assert [o.outcome for o in results] == [archive_module.OPENED]  # step 4 found the restore's flag
        assert "archive" not in meta_of(client, table, ALICE, session_id)
        assert archive_keys(s3) == []

    @pytest.mark.parametrize("via", ["open", "send"])
    @pytest.mark.parametrize(("step", "nth"), [("mark", 1), ("delete", 1)])
    def test_a_rerun_between_a_restores_puts_and_its_clear_deletes_nothing(
        self, cold, client, table, s3, crash_after, monkeypatch, step, nth, via
    ):
        monkeypatch.setattr(archive_module, "TRANSACTION_ITEMS", 2)  # several batches each way
        session_id = old_chat(cold, turns=5)
        stale = cold.get_session(ALICE, session_id)  # a tab that showed the chat before it was archived
        before = snapshot(partition(client, table, ALICE, session_id))
        crash_after(step, nth)  # marked, every item (or all but the first batch) still in the table
        with pytest.raises(Crash):
            run_archive(cold)
        reruns = []

        def rerun_meanwhile(name: str) -> None:
            if name == "put" and not reruns:  # the restore's items are back, its mark not yet cleared
                reruns.append([o.outcome for _, o in run_archive(cold).outcomes])

        monkeypatch.setattr(archive_module, "after_step", rerun_meanwhile)
        if via == "open":
            cold.open_session(ALICE, session_id)
        else:
            cold.send_message(ALICE, stale, "question 5", system_prompt_id="p")
        monkeypatch.setattr(archive_module, "after_step", archive_module._no_crash)
        bodies = [m.input_body for m in cold.open_session(ALICE, session_id).messages]
        assert bodies == [f"question {n}" for n in range(5 if via == "open" else 6)]
        assert reruns == [[archive_module.OPENED]]  # the rerun saw the restore's flag and left the chat alone
        if via == "open":
            assert snapshot(partition(client, table, ALICE, session_id)) == before
        assert "archive" not in meta_of(client, table, ALICE, session_id)
        assert archive_keys(s3) == []

    def test_a_crashed_restore_leaves_the_chat_whole_for_the_next_open(
        self, cold, client, table, s3, crash_after, monkeypatch
    ):
        session_id = old_chat(cold, turns=3)
        before = snapshot(partition(client, table, ALICE, session_id))
        crash_after("mark")
        with pytest.raises(Crash):
            run_archive(cold)
        crash_after("flag")  # the open flagged its restore, then stopped
        with pytest.raises(Crash):
            cold.open_session(ALICE, session_id)
        monkeypatch.setattr(archive_module, "after_step", archive_module._no_crash)
        assert [o.outcome for _, o in run_archive(cold).outcomes] == [archive_module.OPENED]  # leaves it alone
        assert len(partition(client, table, ALICE, session_id)) == 4
        assert len(cold.open_session(ALICE, session_id).messages) == 3
        assert snapshot(partition(client, table, ALICE, session_id)) == before
        assert archive_keys(s3) == []


# --- what is not archived --------------------------------------------------------------------------------------


class TestNotArchived:
    def test_a_chat_with_a_pending_turn_is_left_live_and_its_answer_lands(self, cold, client, table, s3):
        session_id = old_chat(cold, turns=2)
        moments = iter(OLD + dt.timedelta(minutes=5, seconds=i) for i in range(10))
        with keys.clock(lambda: next(moments)):  # asked long ago, still being answered (or its worker is gone)
            _, pending = cold.send_message(ALICE, cold.get_session(ALICE, session_id), "slow", system_prompt_id="p")
        assert [o.outcome for _, o in run_archive(cold).outcomes] == [archive_module.BUSY]
        assert len(partition(client, table, ALICE, session_id)) == 4
        assert "archive" not in meta_of(client, table, ALICE, session_id)
        assert archive_keys(s3) == []
        cold.finish_message(
            ALICE,
            pending,
            output_body="late answer",
            input_token=1,
            output_token=2,
            response_start_time=keys.now(),
            response_end_time=keys.now(),
        )
        assert texts(cold, session_id)[-1] == ("slow", "late answer")

    def test_a_chat_pinned_between_the_read_and_the_mark_is_left_live(self, cold, client, table, s3, monkeypatch):
        session_id = old_chat(cold)

        def pin_meanwhile(step):
            if step == "verify":
                cold.set_pinned(ALICE, cold.get_session(ALICE, session_id), True)

        monkeypatch.setattr(archive_module, "after_step", pin_meanwhile)
        assert [o.outcome for _, o in run_archive(cold).outcomes] == [CHANGED]
        assert len(partition(client, table, ALICE, session_id)) == 4
        meta = meta_of(client, table, ALICE, session_id)
        assert "archive" not in meta and "pinned_at" in meta
        assert archive_keys(s3) == []  # its object went with it
