"""The cold tier's operator side (docs/archive.md): `admin archive`, and check, repair, retention, purge-user and
export-user over archived chats. The admin commands run on a real table (the embedded moto server) with the
embedded folder object store, as on a laptop."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
import zipfile

import pytest

from lib import admin
from lib.embedded.objects import FolderObjects
from lib.storage import keys
from lib.storage.gateway import to_item
from tests.objects_helpers import store_with
from tests.test_archive import OLD, old_chat, partition

ALICE, BOB = "alice@example.com", "bob@example.com"


@pytest.fixture
def folder(tmp_path, monkeypatch, table):
    path = tmp_path / "objects"
    monkeypatch.setenv("CHAT_TABLE", table)
    monkeypatch.setenv("CHAT_DATA_DIR", ":memory:")
    monkeypatch.setenv("CHAT_OBJECTS_DIR", str(path))
    return path


@pytest.fixture
def cold(client, table, meter, folder):
    return store_with(client, table, meter, FolderObjects(folder))


def archive_files(folder) -> list:
    return sorted(p for p in folder.rglob("*") if p.is_file() and "archive" in p.parts)


def age(paths, hours: float = 2) -> None:
    then = time.time() - hours * 3600
    for path in paths:
        os.utime(path, (then, then))


class TestTheArchiveCommand:
    def test_bad_arguments_are_refused_before_anything_changes(self, cold, client, table, capsys):
        session_id = old_chat(cold)
        assert admin.main(["archive", "--days", "0"]) == 2
        assert "positive" in capsys.readouterr().err
        with pytest.raises(SystemExit):
            admin.main(["archive", "--days", "soon"])
        assert len(partition(client, table, ALICE, session_id)) == 4

    def test_a_dry_run_says_what_would_go_and_changes_nothing(self, cold, client, table, folder, capsys):
        session_id = old_chat(cold)
        assert admin.main(["archive", "--days", "30", "--dry-run"]) == 0
        out = capsys.readouterr().out
        assert f"session {session_id}: would archive (3 items, 3 turns)" in out
        assert "(dry run: nothing changed)" in out
        assert len(partition(client, table, ALICE, session_id)) == 4 and archive_files(folder) == []

    def test_it_archives_old_chats_of_every_user_and_a_rerun_changes_nothing(self, cold, client, table, folder, capsys):
        alice, bob = old_chat(cold, ALICE), old_chat(cold, BOB)
        fresh = old_chat(cold, ALICE, at=dt.datetime.now(dt.UTC))
        assert admin.main(["archive", "--days", "30"]) == 0
        out = capsys.readouterr().out
        assert "2 chats archived (6 turns)" in out
        assert len(archive_files(folder)) == 2
        assert [len(partition(client, table, u, s)) for u, s in ((ALICE, alice), (BOB, bob), (ALICE, fresh))] == [
            1,
            1,
            4,
        ]
        assert admin.main(["archive", "--days", "30"]) == 0
        assert "0 chats archived (0 turns), 0 interrupted archives finished, 2 already archived" in (
            capsys.readouterr().out
        )
        assert admin.main(["archive", "--days", "30", "--user", BOB]) == 0
        assert "1 already archived" in capsys.readouterr().out


class TestCheckAndRepair:
    def test_an_archived_chat_is_healthy_not_an_empty_one(self, cold, capsys):
        old_chat(cold)
        admin.main(["archive", "--days", "30"])
        capsys.readouterr()
        assert admin.main(["check", "--user", ALICE]) == 0
        out = capsys.readouterr().out
        assert "message_count" not in out and "VIOLATION" not in out
        assert "cold tier: 1 archived chats, 1 archive objects, 0 unreadable, 0 orphans" in out
        assert admin.main(["repair", "--user", ALICE]) == 0
        assert "0 repairs made" in capsys.readouterr().out

    @pytest.mark.parametrize("damage", ["missing", "corrupt"])
    def test_a_missing_or_corrupt_object_is_a_violation(self, cold, client, table, folder, capsys, damage):
        session_id = old_chat(cold)
        admin.main(["archive", "--days", "30"])
        (path,) = archive_files(folder)
        if damage == "missing":
            path.unlink()
        else:
            path.write_bytes(b"\x1f\x8b not what was written")
        capsys.readouterr()
        assert admin.main(["check", "--all"]) == 1
        out = capsys.readouterr().out
        said = "missing" if damage == "missing" else "damaged (checksum mismatch)"
        assert f"VIOLATION {ALICE} session {session_id}: archived, but its object is {said}" in out
        assert admin.main(["repair", "--all"]) == 0  # nothing repair can do; it deletes nothing
        assert len(partition(client, table, ALICE, session_id)) == 1
        assert "archive" in client.get_item(TableName=table, Key=to_item(keys.meta_key(ALICE, session_id)))["Item"]

    def test_an_orphan_older_than_an_hour_is_removed_and_a_named_object_never(self, cold, folder, monkeypatch, capsys):
        from lib.storage import archive as archive_module

        kept = old_chat(cold)
        admin.main(["archive", "--days", "30"])
        orphaned = old_chat(cold)

        def crash(step):
            if step == "verify":
                raise KeyboardInterrupt  # stopped before the mark: the object is an orphan

        monkeypatch.setattr(archive_module, "after_step", crash)
        with pytest.raises(KeyboardInterrupt):
            cold.archive.archive_chat(ALICE, orphaned, cold.get_session(ALICE, orphaned).last_message_time)
        monkeypatch.setattr(archive_module, "after_step", archive_module._no_crash)
        assert len(archive_files(folder)) == 2
        capsys.readouterr()
        assert admin.main(["check", "--user", ALICE]) == 0
        assert "0 orphans, 1 too new to judge" in capsys.readouterr().out
        age(archive_files(folder))
        assert admin.main(["check", "--user", ALICE]) == 1
        assert admin.main(["repair", "--user", ALICE, "--dry-run"]) == 0
        assert "would remove 1 orphaned archive objects" in capsys.readouterr().out
        assert admin.main(["repair", "--user", ALICE]) == 0
        assert "removed 1 orphaned archive objects" in capsys.readouterr().out
        assert len(archive_files(folder)) == 1
        assert [m.output_body for m in cold.open_session(ALICE, kept).messages][-1] == "answer 2"

    def test_a_long_body_of_an_archived_chat_is_not_an_orphan(self, cold, folder, capsys):
        moments = iter(OLD + dt.timedelta(seconds=i) for i in range(100))
        with keys.clock(lambda: next(moments)):
            session, message = cold.create_session(ALICE, "L" * 40_000, system_prompt_id="p")
        admin.main(["archive", "--days", "30"])
        age(p for p in folder.rglob("*") if p.is_file())
        capsys.readouterr()
        assert admin.main(["check", "--user", ALICE]) == 0
        assert "0 orphans, 0 pointers to missing objects" in capsys.readouterr().out
        admin.main(["repair", "--user", ALICE])
        (turn,) = cold.open_session(ALICE, session.session_id).messages
        assert cold.bodies.text(ALICE, turn, "input", action="open") == "L" * 40_000


class TestDeletionAndExport:
    def test_retention_deletes_an_archived_chat_and_its_object(self, cold, client, table, folder, capsys):
        session_id = old_chat(cold)
        admin.main(["archive", "--days", "30"])
        assert admin.main(["retention", "--older-than", "60"]) == 0
        assert "1 archive_object" in capsys.readouterr().out
        assert partition(client, table, ALICE, session_id) == [] and archive_files(folder) == []

    def test_retention_deletes_a_chats_long_bodies_and_attached_files_after_its_items(self, cold, folder, capsys):
        from lib.turn.attachments import prepare

        moments = iter(OLD + dt.timedelta(seconds=i) for i in range(100))
        with keys.clock(lambda: next(moments)):
            files = prepare([("notes.md", b"# Notes\nship it on Friday\n")], max_bytes=1024, max_count=1)
            session, _ = cold.create_session(ALICE, "L" * 40_000, system_prompt_id="p", attachments=files)
        kept, _ = cold.create_session(ALICE, "a chat of today", system_prompt_id="p")

        def stored():  # the kinds of object left: users/<user>/<kind>/...
            return sorted(p.relative_to(folder).parts[2] for p in folder.rglob("*") if p.is_file())

        assert stored() == ["bodies", "files"]
        capsys.readouterr()
        assert admin.main(["retention", "--older-than", "60"]) == 0
        report = capsys.readouterr().out
        assert "1 body_object" in report and "1 attachment_object" in report
        assert stored() == []  # nothing left for `repair` to sweep up
        assert cold.get_session(ALICE, kept.session_id).title == "a chat of today"

    def test_a_chat_with_a_file_is_archived_its_file_kept_and_read_again_after_the_restore(self, cold, folder, capsys):
        from lib.turn.attachments import prepare

        moments = iter(OLD + dt.timedelta(seconds=i) for i in range(100))
        with keys.clock(lambda: next(moments)):
            files = prepare([("notes.md", b"# Notes\nship it on Friday\n")], max_bytes=1024, max_count=1)
            session, message = cold.create_session(
                ALICE, "what do my notes say?", system_prompt_id="p", attachments=files
            )
            cold.finish_message(
                ALICE,
                message,
                output_body="Ship it on Friday.",
                input_token=1,
                output_token=1,
                response_start_time=keys.now(),
                response_end_time=keys.now(),
            )
        capsys.readouterr()
        assert admin.main(["archive", "--days", "30"]) == 0
        assert "1 chats archived" in capsys.readouterr().out
        stored = [p for p in folder.rglob("*") if p.is_file() and "files" in p.parts]  # the file, kept where it was
        assert stored and archive_files(folder)
        age(p for p in folder.rglob("*") if p.is_file())  # past the orphan grace: judged, not left for later
        assert admin.main(["check", "--user", ALICE]) == 0
        assert "ORPHAN" not in capsys.readouterr().out  # the file's record is read from the archive
        assert admin.main(["repair", "--user", ALICE]) == 0
        assert all(p.exists() for p in stored)  # repair kept it
        (turn,) = cold.open_session(ALICE, session.session_id).messages  # opening restores the chat
        (attachment,) = turn.attachments
        assert cold.attachments.read(ALICE, session.session_id, attachment, action="attachment").startswith(b"# Notes")

    def test_purge_user_deletes_the_archive_objects_and_proves_none_is_left(self, cold, folder, capsys):
        old_chat(cold, ALICE)
        old_chat(cold, BOB)
        admin.main(["archive", "--days", "30"])
        capsys.readouterr()
        assert admin.main(["purge-user", "--user", ALICE, "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["objects"] == 1 and report["left"]["objects"] == 0
        (left,) = archive_files(folder)
        assert keys.user_object_prefix(BOB).split("/")[1] in left.parts

    def test_export_user_holds_an_archived_chats_turns_and_leaves_it_archived(self, cold, client, table, tmp_path):
        session_id = old_chat(cold)
        admin.main(["archive", "--days", "30"])
        out = tmp_path / "alice.zip"
        assert admin.main(["export-user", "--user", ALICE, "--out", str(out)]) == 0
        with zipfile.ZipFile(out) as exported:
            (name,) = [n for n in exported.namelist() if n.endswith(f"{session_id}.json")]
            turns = json.loads(exported.read(name))["messages"]
        assert [t["output_body"] for t in turns] == ["answer 0", "answer 1", "answer 2"]
        assert len(partition(client, table, ALICE, session_id)) == 1  # still archived

    def test_export_user_holds_an_archived_chats_kept_versions_and_running_summary(self, cold, client, table, tmp_path):
        from lib.storage.records import Summary
        from lib.storage.summaries import SummaryStore

        session_id = old_chat(cold, turns=2)
        first = cold.open_session(ALICE, session_id).messages[0]
        moments = iter(OLD + dt.timedelta(minutes=5, seconds=i) for i in range(20))
        with keys.clock(lambda: next(moments)):  # regenerated long ago: "answer 0" is kept as version 1
            again = cold.versions.regenerate(ALICE, first)
            cold.finish_message(
                ALICE,
                again,
                output_body="a second answer",
                input_token=1,
                output_token=3,
                response_start_time=keys.now(),
                response_end_time=keys.now(),
            )
            SummaryStore(client, table).put(
                ALICE,
                Summary(session_id, "they asked twice", 0, first.message_id, 1, "extractive", "demo", keys.now()),
                previous=None,
            )
        live = tmp_path / "live.zip"
        assert admin.main(["export-user", "--user", ALICE, "--out", str(live)]) == 0
        assert admin.main(["archive", "--days", "30"]) == 0
        assert len(partition(client, table, ALICE, session_id)) == 1  # archived: versions and summary too
        cold_zip = tmp_path / "archived.zip"
        assert admin.main(["export-user", "--user", ALICE, "--out", str(cold_zip)]) == 0

        def derived(path):
            with zipfile.ZipFile(path) as exported:
                (name,) = [n for n in exported.namelist() if n.endswith(f"{session_id}.derived.json")]
                return json.loads(exported.read(name))

        found = derived(cold_zip)
        assert [v["output_body"] for v in found["turn_versions"]] == ["answer 0"]
        assert found["running_summary"]["text"] == "they asked twice"
        assert found == derived(live)  # the same file as before it was archived
        assert len(partition(client, table, ALICE, session_id)) == 1  # still archived
