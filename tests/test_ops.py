"""Operator commands on a real table: check finds everything, repair fixes what is mechanical, purge,
export, retention and the pending sweep keep the per-session invariants, and resume after a crash."""

from __future__ import annotations

import datetime as dt
import json
import threading
import zipfile

import pytest

from lib import admin
from lib.errors import NoSuchUser, SessionChanged, SessionNotFound
from lib.ops import deletion
from lib.ops.invariants import check_all, check_user
from lib.ops.repair import repair
from lib.ops.retention import retention, sweep_pending
from lib.ops.users import (
    export_user,
    purge_user,
    rebuild_registry,
    registered_users,
    summarize,
)
from lib.storage import keys
from lib.storage.gateway import from_item, to_item
from lib.storage.operator import Operator
from lib.storage.records import INTERRUPTED

ANN, BOB = "ann@example.com", "bob@example.com"


@pytest.fixture
def db(client, table, meter) -> Operator:
    return Operator(client, table, meter)


def chats(store, user, sessions=2, turns=3, *, at=None):
    """`sessions` chats of `turns` finished turns each, optionally written at a past time."""
    made = []
    with keys.clock(lambda: at) if at else _nothing():
        for s in range(sessions):
            session, message = store.create_session(user, f"{user} chat {s}", system_prompt_id="p")
            for t in range(turns):
                store.finish_message(
                    user,
                    message,
                    output_body=f"answer {t}",
                    input_token=1,
                    output_token=1,
                    response_start_time=message.create_time,
                    response_end_time=message.create_time,
                )
                if t < turns - 1:
                    session, message = store.send_message(user, session, f"question {t + 1}", system_prompt_id="p")
            made.append(session)
    return made


def race_retention_with_sends(store, db, user, old) -> list[tuple[str, str]]:
    """One thread sends to each of `old` (chats last active long ago) while another runs retention; the
    (session, message) of every send the store acknowledged."""
    acknowledged: list[tuple[str, str]] = []
    failures: list[BaseException] = []
    start = threading.Barrier(2)

    def send_to_each():
        start.wait()
        for session in old:
            try:
                _, turn = store.send_message(user, session, "still using this", system_prompt_id="p")
            except (SessionNotFound, SessionChanged):
                continue  # not acknowledged: the page says the chat is gone
            acknowledged.append((session.session_id, turn.message_id))

    def retain():
        start.wait()
        retention(db, 90, dry_run=False)

    def guarded(work):
        try:
            work()
        except BaseException as exc:  # re-raised in the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=guarded, args=(work,)) for work in (send_to_each, retain)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)  # a bound on a hang, not on speed
    assert not any(t.is_alive() for t in threads)
    if failures:
        raise failures[0]
    return acknowledged


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def everything(client, table) -> list[dict]:
    """Every item but the audit trail's (an admin command adds its records; tests/test_audit.py checks them)."""
    items = [from_item(i) for i in client.scan(TableName=table)["Items"]]
    return [i for i in items if not i["pk"].startswith(keys.AUDIT_PREFIX)]


def user_items(client, table, user) -> list[dict]:
    return [
        i
        for i in everything(client, table)
        if i["pk"].startswith(keys.user_pk(user) + "#") or i["pk"] == keys.user_pk(user)
    ]


class TestCheck:
    def test_turns_without_a_meta_or_row_are_found_by_a_deep_check_and_by_all(self, store, client, table, db):
        (session,) = chats(store, ANN, sessions=1)
        client.delete_item(TableName=table, Key=to_item(keys.meta_key(ANN, session.session_id)))
        client.delete_item(
            TableName=table, Key=to_item(keys.list_key(ANN, session.last_message_time, session.session_id))
        )
        assert check_user(client, table, ANN).ok  # invisible from the sidebar rows alone
        deep = check_user(client, table, ANN, deep=True)
        assert [p.what for p in deep.problems] == ["3 turns but no meta (orphaned turns)"]
        (everyone,) = [r for r in check_all(db) if r.user_id == ANN]
        assert everyone.violations == deep.violations

    def test_a_meta_without_a_row_and_an_unknown_record_are_violations(self, store, client, table):
        (session, other) = chats(store, ANN)
        client.delete_item(
            TableName=table, Key=to_item(keys.list_key(ANN, session.last_message_time, session.session_id))
        )
        client.put_item(TableName=table, Item=to_item({"pk": keys.session_pk(ANN, other.session_id), "sk": "ODD#1"}))
        found = set(check_user(client, table, ANN, deep=True).violations)
        assert found == {
            f"session {other.session_id}: unknown record 'ODD#1'",
            f"session {session.session_id}: has 0 sidebar rows",
        }

    def test_the_cli_exits_1_on_a_violation_and_0_when_healthy(self, store, client, table, monkeypatch, capsys):
        monkeypatch.setenv("CHAT_TABLE", table)
        monkeypatch.setenv("CHAT_DATA_DIR", ":memory:")
        (session,) = chats(store, ANN, sessions=1)
        assert admin.main(["check", "--user", ANN]) == 0
        client.update_item(
            TableName=table,
            Key=to_item(keys.meta_key(ANN, session.session_id)),
            UpdateExpression="SET message_count = :n",
            ExpressionAttributeValues=to_item({":n": 7}),
        )
        assert admin.main(["check", "--all"]) == 1
        assert "message_count 7, 3 turns stored" in capsys.readouterr().out


class TestRepair:
    def break_everything(self, store, client, table):
        orphan, moved, counted = chats(store, ANN, sessions=3)
        client.delete_item(TableName=table, Key=to_item(keys.meta_key(ANN, orphan.session_id)))
        client.delete_item(
            TableName=table, Key=to_item(keys.list_key(ANN, orphan.last_message_time, orphan.session_id))
        )
        client.put_item(
            TableName=table,
            Item=to_item(
                {
                    **keys.list_key(ANN, "2001-01-01T00:00:00.000Z", moved.session_id),
                    "session_id": moved.session_id,
                    "title": "stale copy",
                }
            ),
        )
        client.update_item(
            TableName=table,
            Key=to_item(keys.meta_key(ANN, counted.session_id)),
            UpdateExpression="SET message_count = :n",
            ExpressionAttributeValues=to_item({":n": 9}),
        )
        return orphan, moved, counted

    def test_a_dry_run_changes_nothing(self, store, client, table, db):
        self.break_everything(store, client, table)
        before = everything(client, table)
        outcomes = repair(db, check_user(client, table, ANN, deep=True), dry_run=True)
        assert len(outcomes) == 3 and not any(o.done for o in outcomes)
        assert everything(client, table) == before

    def test_repair_makes_the_check_pass_and_keeps_every_turn(self, store, client, table, db):
        orphan, _, _ = self.break_everything(store, client, table)
        turns_before = sorted(i["sk"] for i in everything(client, table) if i["sk"].startswith("MSG#"))
        outcomes = repair(db, check_user(client, table, ANN, deep=True), dry_run=False)
        assert all(o.done for o in outcomes) and len(outcomes) == 3
        assert check_user(client, table, ANN, deep=True).ok
        assert sorted(i["sk"] for i in everything(client, table) if i["sk"].startswith("MSG#")) == turns_before
        rebuilt = store.get_session(ANN, orphan.session_id)
        assert (rebuilt.title, rebuilt.message_count) == (f"{ANN} chat 0", 3)

    def test_a_session_that_changed_since_the_check_is_skipped(self, store, client, table, db):
        (session,) = chats(store, ANN, sessions=1)
        client.update_item(
            TableName=table,
            Key=to_item(keys.meta_key(ANN, session.session_id)),
            UpdateExpression="SET message_count = :n",
            ExpressionAttributeValues=to_item({":n": 9}),
        )
        report = check_user(client, table, ANN)
        store.send_message(ANN, session, "a send after the check", system_prompt_id="p")
        (outcome,) = repair(db, report, dry_run=False)
        assert not outcome.done and "changed meanwhile" in outcome.note


class TestAKilledPurge:
    def test_check_reports_the_unfinished_purge_and_repair_brings_nothing_back(
        self, store, client, table, db, monkeypatch
    ):
        chats(store, ANN, sessions=2)
        real = deletion._partition_keys
        monkeypatch.setattr(deletion, "_partition_keys", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
        with pytest.raises(KeyboardInterrupt):
            purge_user(db, ANN, dry_run=False)
        for report in (check_user(client, table, ANN), check_user(client, table, ANN, deep=True)):
            assert report.ok and len(report.pending_deletion) == 2
        (everyone,) = [r for r in check_all(db) if r.user_id == ANN]
        assert everyone.ok and len(everyone.pending_deletion) == 2
        assert repair(db, check_user(client, table, ANN, deep=True), dry_run=False) == []
        assert store.list_sessions(ANN).items == []
        monkeypatch.setattr(deletion, "_partition_keys", real)
        purge_user(db, ANN, dry_run=False)
        assert user_items(client, table, ANN) == []

    def test_the_cli_says_a_deletion_is_unfinished(self, store, client, table, db, monkeypatch, capsys):
        monkeypatch.setenv("CHAT_TABLE", table)
        monkeypatch.setenv("CHAT_DATA_DIR", ":memory:")
        chats(store, ANN, sessions=1)
        monkeypatch.setattr(deletion, "_partition_keys", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
        with pytest.raises(KeyboardInterrupt):
            purge_user(db, ANN, dry_run=False)
        capsys.readouterr()
        assert admin.main(["check", "--user", ANN]) == 0
        assert "1 chats under an unfinished purge-user" in capsys.readouterr().out


class TestUsers:
    def test_users_come_from_the_registry_with_counts(self, store, db):
        chats(store, ANN, sessions=2, turns=3)
        chats(store, BOB, sessions=1, turns=1)
        assert [u for u in registered_users(db) if u in (ANN, BOB)] == [ANN, BOB]
        ann = summarize(db, ANN)
        assert (ann.sessions, ann.turns) == (2, 6) and ann.last_activity and ann.first_time

    def test_rebuild_registers_users_of_an_older_table(self, store, client, table, db):
        chats(store, ANN, sessions=1)
        client.delete_item(TableName=table, Key=to_item(keys.registry_key(ANN)))
        assert ANN not in list(registered_users(db))
        assert rebuild_registry(db) >= 1 and ANN in list(registered_users(db))


class TestPurge:
    def test_purge_removes_every_item_of_the_user_and_nothing_of_anyone_else(self, store, client, table, db):
        chats(store, ANN, sessions=3)
        chats(store, BOB, sessions=1)
        client.put_item(TableName=table, Item=to_item({"pk": keys.user_pk(ANN), "sk": "MEM#1", "text": "likes tea"}))
        bob_before = user_items(client, table, BOB)
        dry = purge_user(db, ANN, dry_run=True)
        assert dry["sessions"] == 3 and len(user_items(client, table, ANN)) > 0
        counts = purge_user(db, ANN, dry_run=False)
        assert counts == dry
        assert user_items(client, table, ANN) == []
        assert ANN not in list(registered_users(db))
        assert user_items(client, table, BOB) == bob_before
        report = check_user(client, table, ANN, deep=True)
        assert report.ok and (report.sessions, report.messages) == (0, 0)

    def test_a_purge_killed_midway_hides_every_row_and_resumes(self, store, client, table, db, monkeypatch):
        chats(store, ANN, sessions=3)
        real, calls = deletion._partition_keys, {"n": 0}

        def crash_on_second(*args):
            calls["n"] += 1
            if calls["n"] == 2:
                raise KeyboardInterrupt  # the operator's process dies mid-way
            return real(*args)

        monkeypatch.setattr(deletion, "_partition_keys", crash_on_second)
        with pytest.raises(KeyboardInterrupt):
            purge_user(db, ANN, dry_run=False)
        assert store.list_sessions(ANN).items == []  # no row left pointing at a half-deleted chat
        monkeypatch.setattr(deletion, "_partition_keys", real)
        purge_user(db, ANN, dry_run=False)
        assert user_items(client, table, ANN) == []

    def test_usage_buckets_go_only_when_asked(self, store, client, table, db):
        chats(store, ANN, sessions=1)
        today = dt.date(2026, 11, 30)
        client.put_item(TableName=table, Item=to_item({**keys.usage_key("2026-11-29", ANN), "n.send": 3}))
        assert purge_user(db, ANN, dry_run=False, today=today)["usage_buckets"] == 0
        assert client.get_item(TableName=table, Key=to_item(keys.usage_key("2026-11-29", ANN))).get("Item")
        assert purge_user(db, ANN, dry_run=False, usage=True, today=today)["usage_buckets"] == 1
        assert "Item" not in client.get_item(TableName=table, Key=to_item(keys.usage_key("2026-11-29", ANN)))

    def test_an_unknown_user_is_no_such_user_with_exit_code_2(self, store, client, table, monkeypatch, capsys):
        monkeypatch.setenv("CHAT_TABLE", table)
        monkeypatch.setenv("CHAT_DATA_DIR", ":memory:")
        chats(store, ANN, sessions=1)
        before = everything(client, table)
        assert admin.main(["purge-user", "--user", "ann@exmaple.com"]) == 2  # a typo
        err = capsys.readouterr().err
        assert "no such user" in err and "ann@exmaple.com" in err
        assert everything(client, table) == before

    def test_a_user_whose_chats_are_gone_but_usage_is_left_can_still_be_purged_of_it(self, store, client, table, db):
        chats(store, ANN, sessions=1)
        purge_user(db, ANN, dry_run=False)
        client.put_item(TableName=table, Item=to_item({**keys.usage_key("2026-11-29", ANN), "n.send": 3}))
        assert purge_user(db, ANN, dry_run=False, usage=True, today=dt.date(2026, 11, 30))["usage_buckets"] == 1
        with pytest.raises(NoSuchUser):
            purge_user(db, ANN, dry_run=False, usage=True, today=dt.date(2026, 11, 30))


class TestUserIdsOfAdminCommands:
    """`--user` is a key's first part: an id that holds '#' would reach into another user's chat."""

    @pytest.fixture
    def cli(self, table, monkeypatch):
        monkeypatch.setenv("CHAT_TABLE", table)
        monkeypatch.setenv("CHAT_DATA_DIR", ":memory:")

    @pytest.mark.parametrize("command", [["purge-user"], ["check"], ["repair"], ["export-user", "--out", "x.zip"]])
    def test_an_id_reaching_into_bobs_chat_is_refused_and_bobs_chat_stays(
        self, cli, store, client, table, capsys, command, tmp_path, monkeypatch
    ):
        monkeypatch.chdir(tmp_path)
        (session,) = chats(store, BOB, sessions=1)
        before = everything(client, table)
        code = admin.main([command[0], "--user", f"{BOB}#SES#{session.session_id}", *command[1:]])
        err = capsys.readouterr().err
        assert code == 2 and "#" in err and "Traceback" not in err
        assert everything(client, table) == before and not (tmp_path / "x.zip").exists()
        assert check_user(client, table, BOB, deep=True).ok

    def test_an_email_no_sign_in_gives_is_refused_with_the_id_the_sign_in_makes(
        self, cli, store, client, table, capsys
    ):
        chats(store, BOB, sessions=1)
        before = everything(client, table)
        assert admin.main(["purge-user", "--user", "Bob@Example.com"]) == 2
        assert f"use '{BOB}'" in capsys.readouterr().err
        assert everything(client, table) == before


class TestExport:
    def test_every_chat_is_exported_as_markdown_and_json(self, store, db, tmp_path):
        made = chats(store, ANN, sessions=2, turns=2)
        counts = export_user(store, db, ANN, tmp_path / "ann.zip")
        assert counts == {"sessions": 2, "turns": 4, "memories": 0, "files": 0}
        with zipfile.ZipFile(tmp_path / "ann.zip") as archive:
            names = archive.namelist()
            assert sum(n.endswith(".md") for n in names) == 2 and "memories.json" in names
            data = json.loads(archive.read(next(n for n in names if made[0].session_id in n and n.endswith(".json"))))
        assert [m["input_body"] for m in data["messages"]] == [f"{ANN} chat 0", "question 1"]

    def test_the_cli_refuses_to_overwrite_a_file(self, table, monkeypatch, tmp_path, capsys):
        monkeypatch.setenv("CHAT_TABLE", table)
        monkeypatch.setenv("CHAT_DATA_DIR", ":memory:")
        (tmp_path / "x.zip").write_text("keep me")
        assert admin.main(["export-user", "--user", ANN, "--out", str(tmp_path / "x.zip")]) == 2
        assert "exists" in capsys.readouterr().err and (tmp_path / "x.zip").read_text() == "keep me"


class TestRetention:
    def test_old_sessions_go_whole_and_recent_ones_stay(self, store, client, table, db):
        now = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
        (old,) = chats(store, ANN, sessions=1, at=now - dt.timedelta(days=100))
        (recent,) = chats(store, ANN, sessions=1, at=now - dt.timedelta(days=10))
        assert retention(db, 90, dry_run=True, now=now)[ANN].session_ids == [old.session_id]
        assert store.get_session(ANN, old.session_id)  # the dry run left it
        retention(db, 90, dry_run=False, now=now)
        assert [s.session_id for s in store.list_sessions(ANN).items] == [recent.session_id]
        assert not [i for i in everything(client, table) if old.session_id in i["pk"] + i["sk"]]
        assert check_user(client, table, ANN, deep=True).ok

    def test_a_chat_revived_after_the_listing_is_kept_whole(self, store, client, table, db, monkeypatch):
        now = dt.datetime.now(dt.UTC)
        (old,) = chats(store, ANN, sessions=1, at=now - dt.timedelta(days=100))
        listed, sent = Operator.sessions_last_active_before, {}

        def then_the_user_sends(self, user_id, cutoff):
            found = listed(self, user_id, cutoff)
            sent["turn"] = store.send_message(ANN, old, "I am back", system_prompt_id="p")[1]  # acknowledged
            return found

        monkeypatch.setattr(Operator, "sessions_last_active_before", then_the_user_sends)
        results = retention(db, 90, dry_run=False)
        assert ANN not in results or results[ANN].sessions == 0
        view = store.open_session(ANN, old.session_id)
        assert sent["turn"].message_id in [m.message_id for m in view.messages]
        assert check_user(client, table, ANN, deep=True).ok and db.user_partition(ANN, keys.PURGE_PREFIX) == []

    def test_retention_racing_sends_in_threads_never_loses_an_acknowledged_turn(self, store, client, table, db):
        old_time = dt.datetime.now(dt.UTC) - dt.timedelta(days=100)
        lost, broken = {}, {}
        for round_ in range(10):
            user = f"race{round_}@example.com"
            old = chats(store, user, sessions=6, turns=1, at=old_time)
            acknowledged = race_retention_with_sends(store, db, user, old)
            kept = {m.message_id for s, _ in acknowledged for m in store.all_messages(user, s)}
            if missing := [m for _, m in acknowledged if m not in kept]:
                lost[round_] = len(missing)
            report = check_user(client, table, user, deep=True)
            if not report.ok or report.pending_deletion:
                broken[round_] = report.violations
        assert lost == {} and broken == {}  # rounds that lost acknowledged turns, or left broken chats

    def test_a_retention_killed_after_hiding_its_chats_is_finished_by_the_next_run(
        self, store, client, table, db, monkeypatch
    ):
        now = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
        (old,) = chats(store, ANN, sessions=1, at=now - dt.timedelta(days=100))
        (recent,) = chats(store, ANN, sessions=1, at=now - dt.timedelta(days=10))
        real = deletion._partition_keys

        def killed(*args):
            raise KeyboardInterrupt  # the operator's process dies with the chat hidden, its turns still there

        monkeypatch.setattr(deletion, "_partition_keys", killed)
        with pytest.raises(KeyboardInterrupt):
            retention(db, 90, dry_run=False, now=now)
        assert [s.session_id for s in store.list_sessions(ANN).items] == [recent.session_id]
        report = check_user(client, table, ANN, deep=True)
        assert report.ok and report.pending_deletion == [old.session_id]
        assert repair(db, report, dry_run=False) == []  # nothing under a marker is brought back
        monkeypatch.setattr(deletion, "_partition_keys", real)
        retention(db, 365, dry_run=False, now=now)  # a cutoff that lists nothing: the marker's own work is finished
        assert not [i for i in everything(client, table) if old.session_id in i["pk"] + i["sk"]]
        assert [s.session_id for s in store.list_sessions(ANN).items] == [recent.session_id]
        report = check_user(client, table, ANN, deep=True)
        assert report.ok and report.pending_deletion == []

    def test_a_chat_revived_after_a_killed_retention_listed_it_is_kept_by_the_rerun(
        self, store, client, table, db, monkeypatch
    ):
        (old,) = chats(store, ANN, sessions=1, at=dt.datetime.now(dt.UTC) - dt.timedelta(days=100))
        marked = Operator.mark_purging

        def killed_after_marking(self, *args, **kwargs):
            marked(self, *args, **kwargs)
            raise KeyboardInterrupt

        monkeypatch.setattr(Operator, "mark_purging", killed_after_marking)
        with pytest.raises(KeyboardInterrupt):
            retention(db, 90, dry_run=False)
        monkeypatch.setattr(Operator, "mark_purging", marked)
        _, turn = store.send_message(ANN, old, "back again", system_prompt_id="p")
        retention(db, 90, dry_run=False)
        assert turn.message_id in [m.message_id for m in store.open_session(ANN, old.session_id).messages]
        assert check_user(client, table, ANN, deep=True).ok and db.user_partition(ANN, keys.PURGE_PREFIX) == []

    def test_a_registry_entry_no_key_can_be_built_from_is_skipped(self, store, client, table, db):
        now = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
        (old,) = chats(store, ANN, sessions=1, at=now - dt.timedelta(days=100))
        client.put_item(TableName=table, Item=to_item({"pk": keys.REGISTRY_PK, "sk": "USER#a#SES#b", "user_id": "x"}))
        assert retention(db, 90, dry_run=False, now=now)[ANN].session_ids == [old.session_id]

    def test_a_bad_cutoff_is_refused(self, db):
        with pytest.raises(ValueError, match="positive"):
            retention(db, 0, dry_run=True)


class TestSweepPending:
    def test_only_turns_pending_past_the_cutoff_are_marked_failed(self, store, db):
        now = dt.datetime(2026, 11, 30, 12, tzinfo=dt.UTC)
        with keys.clock(lambda: now - dt.timedelta(hours=2)):
            stuck_session, stuck = store.create_session(ANN, "left pending by a crash", system_prompt_id="p")
        with keys.clock(lambda: now - dt.timedelta(seconds=30)):
            live_session, _live = store.create_session(ANN, "being answered now", system_prompt_id="p")
        assert sweep_pending(db, 600, dry_run=True, now=now).found == [
            (ANN, stuck_session.session_id, stuck.message_id)
        ]
        swept = sweep_pending(db, 600, dry_run=False, now=now)
        assert swept.marked == 1
        failed = store.open_session(ANN, stuck_session.session_id).messages[0]
        assert (failed.status, failed.error) == ("failed", INTERRUPTED)  # the sentence the page shows when stale
        assert store.open_session(ANN, live_session.session_id).messages[0].status == "pending"

    def test_a_turn_a_retry_restarts_after_the_sweep_looked_is_left_pending(self, store, db, monkeypatch):
        now = dt.datetime(2026, 11, 30, 12, tzinfo=dt.UTC)
        with keys.clock(lambda: now - dt.timedelta(hours=2)):
            session, stuck = store.create_session(ANN, "left pending by a crash", system_prompt_id="p")
        listed = Operator.pending_turns

        def then_retried(self, user_id, session_id):
            found = listed(self, user_id, session_id)
            with keys.clock(lambda: now):
                store.restart_message(ANN, stuck)  # the user clicks Retry between the sweep's read and its write
            return found

        monkeypatch.setattr(Operator, "pending_turns", then_retried)
        swept = sweep_pending(db, 600, dry_run=False, now=now)
        assert (swept.marked, swept.changed_meanwhile) == (0, 1)
        assert store.open_session(ANN, session.session_id).messages[0].status == "pending"
