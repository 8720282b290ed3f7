"""purge-user, retention and export-user cover every record kind a user's chats produce, on a real table; after a
purge, `check --user` proves nothing is left; the purge report counts per kind (text and --json)."""

from __future__ import annotations

import datetime as dt
import json
import zipfile

import pytest

from lib import admin
from lib.ops.retention import retention
from lib.ops.users import export_user, purge_user
from lib.storage import keys
from lib.storage.gateway import from_item, to_item
from lib.storage.operator import Operator
from lib.storage.summaries import SummaryStore

ANN, BOB = "ann@example.com", "bob@example.com"
OLD = dt.datetime(2026, 1, 5, 12, 0, tzinfo=dt.UTC)


@pytest.fixture
def db(client, table, meter) -> Operator:
    return Operator(client, table, meter)


@pytest.fixture
def cli(table, monkeypatch):
    monkeypatch.setenv("CHAT_TABLE", table)
    monkeypatch.setenv("CHAT_DATA_DIR", ":memory:")


def everything(client, table) -> list[dict]:
    return [from_item(i) for i in client.scan(TableName=table)["Items"]]


def of(user, items):
    mine = keys.user_pk(user)
    registry = keys.registry_key(user)
    return [i for i in items if i["pk"] == mine or i["pk"].startswith(mine + "#") or i == {**i, **registry}]


def put(client, table, item):
    client.put_item(TableName=table, Item=to_item(item))


def full_user(store, client, table, user=ANN, *, at=None):
    """A user with one of every record kind: a chat (row, meta, two turns) whose first turn has a kept version,
    a running summary and vectors; memories, the memory switch, custom instructions; a purge marker left by a
    killed deletion; a chat with no sidebar row (its row lost) but with a vector; the registry row (store)."""
    with keys.clock(lambda: at) if at else _nothing():
        session, first = store.create_session(user, "first question", system_prompt_id="p")
        store.finish_message(
            user,
            first,
            output_body="first answer",
            input_token=1,
            output_token=1,
            response_start_time=first.create_time,
            response_end_time=first.create_time,
        )
        session, second = store.send_message(user, session, "second question", system_prompt_id="p")
        store.finish_message(
            user,
            second,
            output_body="second answer",
            input_token=1,
            output_token=1,
            response_start_time=second.create_time,
            response_end_time=second.create_time,
        )
        sid, mid = session.session_id, first.message_id
        client.update_item(
            TableName=table,
            Key=to_item(keys.message_key(user, sid, mid)),
            UpdateExpression="SET versions = :n, version = :v, kept = :k",
            ExpressionAttributeValues=to_item({":n": 2, ":v": 2, ":k": {1}}),
        )
        put(
            client,
            table,
            {
                **keys.version_key(user, sid, mid, 1),
                "message_id": mid,
                "session_id": sid,
                "version": 1,
                "input_body": "first question",
                "output_body": "an older answer",
                "status": "done",
                "create_time": first.create_time,
                "system_prompt_id": "p",
            },
        )
        put(
            client,
            table,
            {
                **keys.summary_key(user, sid),
                "session_id": sid,
                "user_id": user,
                "text": "they asked",
                "version": 1,
                "covered_until": mid,
                "covered_turns": 1,
                "method": "extractive",
                "model": "demo",
                "update_time": keys.now(),
                "tokens": 3,
            },
        )
        put(client, table, {**keys.vector_key(user, sid, mid), "user_id": user, "kind": "turn", "text": "q"})
        put(
            client,
            table,
            {
                **keys.memory_key(user, "m1"),
                "user_id": user,
                "kind": "memory",
                "text": "likes tea",
                "create_time": keys.now(),
            },
        )
        put(client, table, {**keys.preference_key(user, "memory"), "enabled": False})
        put(client, table, {**keys.preference_key(user, "instructions"), "about": "I am ann", "style": "short"})
        # a chat whose sidebar row was lost: its meta, a turn, and the vector that names it
        lost, lost_turn = store.create_session(user, "a lost chat", system_prompt_id="p")
        client.delete_item(TableName=table, Key=to_item(keys.list_key(user, lost.last_message_time, lost.session_id)))
        put(client, table, {**keys.vector_key(user, lost.session_id, lost_turn.message_id), "user_id": user})
        # a killed deletion's marker, naming a chat already gone
        put(client, table, {**keys.purge_key(user, 0), "session_ids": {keys.new_id()}, "source_command": "purge-user"})
    return session, lost


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


class TestPurgeCoversEveryKind:
    def test_nothing_of_the_user_is_left_and_nothing_of_anyone_else_goes(self, store, client, table, db):
        full_user(store, client, table)
        full_user(store, client, table, BOB)
        put(client, table, {**keys.usage_key("2026-11-29", ANN), "n.send": 3})
        bob = of(BOB, everything(client, table))
        counts = purge_user(db, ANN, dry_run=False)
        left = of(ANN, everything(client, table))
        assert left == [], left  # the lost chat (no sidebar row) too: found by its vector
        assert of(BOB, everything(client, table)) == bob
        assert client.get_item(TableName=table, Key=to_item(keys.usage_key("2026-11-29", ANN))).get("Item")
        kinds = counts["kinds"]
        assert kinds[keys.TURN] == 3 and kinds[keys.META] == 2 and kinds[keys.VERSION] == 1
        assert kinds[keys.SUMMARY] == 1 and kinds[keys.VECTOR] == 2 and kinds[keys.MEMORY] == 1
        assert kinds[keys.PREFERENCE] == 2 and kinds[keys.PURGE] == 1 and kinds["registry"] == 1
        assert kinds[keys.LIST_ROW] == 1 and "usage_bucket" not in kinds

    def test_a_dry_run_counts_the_same_kinds_and_deletes_nothing(self, store, client, table, db):
        full_user(store, client, table)
        before = everything(client, table)
        dry = purge_user(db, ANN, dry_run=True)
        assert everything(client, table) == before
        assert dry["kinds"] == purge_user(db, ANN, dry_run=False)["kinds"]

    def test_a_chat_no_row_and_no_vector_points_to_goes_only_with_deep(self, store, client, table, db):
        full_user(store, client, table)
        hidden, _ = store.create_session(ANN, "hidden", system_prompt_id="p")
        client.delete_item(
            TableName=table, Key=to_item(keys.list_key(ANN, hidden.last_message_time, hidden.session_id))
        )
        purge_user(db, ANN, dry_run=False)
        left = sorted(i["sk"] for i in of(ANN, everything(client, table)))
        assert left == sorted([keys.META_SK, keys.message_sk(_turn(store, hidden))])  # only a Scan finds it
        put(client, table, {**keys.registry_key(ANN), "user_id": ANN})  # still known, so a rerun is not a typo
        purge_user(db, ANN, dry_run=False, deep=True)
        assert of(ANN, everything(client, table)) == []

    def test_a_project_whose_list_row_was_lost_goes_with_deep_and_check_deep_sees_it_until_then(
        self, cli, store, client, table, db, capsys
    ):
        """The project's meta (its name and instructions) in USER#<u>#PRJ#<id>, with no PRJ# row to find it by:
        only the deep Scan can, so it must cover the project partitions as well as the session partitions."""
        full_user(store, client, table)
        project = store.projects.create(ANN, "Secret plan", "the instructions")
        client.delete_item(
            TableName=table, Key=to_item(keys.project_row_key(ANN, project.last_activity_time, project.project_id))
        )
        purge_user(db, ANN, dry_run=False)
        left = of(ANN, everything(client, table))
        assert [(i["pk"], i["sk"]) for i in left] == [(keys.project_pk(ANN, project.project_id), keys.PROJECT_META_SK)]
        admin.main(["check", "--user", ANN, "--deep"])
        checked = capsys.readouterr().out
        assert "nothing left" not in checked and "LEFT" in checked  # the Scan sees the project partition
        put(client, table, {**keys.registry_key(ANN), "user_id": ANN})  # still known, so a rerun is not a typo
        dry = purge_user(db, ANN, dry_run=True, deep=True)
        assert dry["kinds"].get(keys.PROJECT_META) == 1  # the report counts what the deep purge will delete
        purge_user(db, ANN, dry_run=False, deep=True)
        assert of(ANN, everything(client, table)) == []
        assert admin.main(["check", "--user", ANN, "--deep"]) == 0
        assert "nothing left" in capsys.readouterr().out

    def test_check_deep_reports_a_lost_project_row_of_a_user_who_still_has_chats(self, store, client, table, db):
        from lib.ops.invariants import check_user

        full_user(store, client, table)
        project = store.projects.create(ANN, "Secret plan", "the instructions")
        client.delete_item(
            TableName=table, Key=to_item(keys.project_row_key(ANN, project.last_activity_time, project.project_id))
        )
        assert check_user(client, table, ANN, db=db).ok  # nothing in the user's partition names it any more
        deep = check_user(client, table, ANN, db=db, deep=True)
        assert not deep.ok and any(project.project_id in v for v in deep.violations), deep.violations


def _turn(store, session) -> str:
    return store.all_messages(ANN, session.session_id)[0].message_id


class TestPurgeReportAndCheck:
    def test_the_report_counts_per_kind_and_check_proves_nothing_is_left(self, cli, store, client, table, capsys):
        full_user(store, client, table)
        assert admin.main(["purge-user", "--user", ANN]) == 0
        out = capsys.readouterr().out
        for line in (
            "turns",
            "turn versions (ALT#)",
            "running summaries",
            "search vectors",
            "memories",
            "preferences (memory switch, custom instructions)",
            "registry row",
            "nothing left",
        ):
            assert line in out, line
        assert "usage ledger: kept" in out and "no chat text" in out
        assert admin.main(["check", "--user", ANN, "--deep"]) == 0
        checked = capsys.readouterr().out
        assert "nothing left" in checked and "no session or project partition in a full Scan" in checked

    def test_a_users_projects_are_counted_under_readable_names(self, cli, store, client, table, capsys):
        full_user(store, client, table)
        store.projects.create(ANN, "Plan", "instructions")
        assert admin.main(["purge-user", "--user", ANN]) == 0
        out = capsys.readouterr().out
        assert "project rows" in out and "project metas" in out and "project_" not in out

    def test_the_json_report_is_one_document_for_a_ticket(self, cli, store, client, table, capsys):
        full_user(store, client, table)
        assert admin.main(["purge-user", "--user", ANN, "--json", "--deep"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["user_id"] == ANN and report["items_by_kind"]["turns"] == 3
        assert report["left"]["scanned"] and report["left"]["user_items"] == 0 and not report["left"]["registry"]
        assert keys.is_id(report["audit_request_id"])

    def test_check_on_a_user_who_still_has_chats_does_not_claim_nothing_is_left(
        self, cli, store, client, table, capsys
    ):
        full_user(store, client, table)
        admin.main(["check", "--user", ANN])
        assert "nothing left" not in capsys.readouterr().out


class TestRetentionCoversEveryKind:
    def test_an_old_chat_goes_with_its_versions_summary_vectors_and_old_memories(self, store, client, table, db):
        session, lost = full_user(store, client, table, at=OLD)
        put(
            client, table, {**keys.memory_key(ANN, "m2"), "user_id": ANN, "text": "new fact", "create_time": keys.now()}
        )
        results = retention(db, 90, dry_run=False)
        left = {i["sk"] for i in of(ANN, everything(client, table)) if i["pk"] == keys.user_pk(ANN)}
        assert not [i for i in everything(client, table) if i["pk"] == keys.session_pk(ANN, session.session_id)]
        # the old chat whose sidebar row was lost goes too, with its vector: its vector names it (1 Query of VEC#)
        assert not [i for i in everything(client, table) if i["pk"] == keys.session_pk(ANN, lost.session_id)]
        assert left == {"MEM#m2", "PREF#memory", "PREF#instructions"}
        assert results[ANN].sessions == 3 and lost.session_id in results[ANN].session_ids  # + the marker's chat
        assert results[ANN].kinds[keys.MEMORY] == 1 and results[ANN].kinds[keys.VERSION] == 1
        assert results[ANN].kinds[keys.SUMMARY] == 1 and results[ANN].kinds[keys.VECTOR] == 2

    def test_a_recent_chat_whose_row_is_lost_stays_and_is_not_reported_kept(self, store, client, table, db):
        recent, turn = store.create_session(ANN, "a recent chat", system_prompt_id="p")
        client.delete_item(
            TableName=table, Key=to_item(keys.list_key(ANN, recent.last_message_time, recent.session_id))
        )
        put(client, table, {**keys.vector_key(ANN, recent.session_id, turn.message_id), "user_id": ANN})
        before = of(ANN, everything(client, table))
        assert retention(db, 90, dry_run=False) == {}
        assert of(ANN, everything(client, table)) == before

    def test_a_dry_run_counts_the_lost_old_chat_and_deletes_nothing(self, store, client, table, db):
        _, lost = full_user(store, client, table, at=OLD)
        before = everything(client, table)
        results = retention(db, 90, dry_run=True)
        assert everything(client, table) == before
        assert results[ANN].sessions == 3 and lost.session_id in results[ANN].session_ids  # + the marker's chat


class TestExportCoversEveryKind:
    def test_versions_and_the_summary_are_exported_with_the_chat(self, store, client, table, db, tmp_path):
        session, _ = full_user(store, client, table)
        export_user(store, db, ANN, tmp_path / "ann.zip", summaries=SummaryStore(client, table))
        with zipfile.ZipFile(tmp_path / "ann.zip") as archive:
            (name,) = [n for n in archive.namelist() if n.endswith(f"{session.session_id}.derived.json")]
            derived = json.loads(archive.read(name))
            prefs = json.loads(archive.read("preferences.json"))
            names = archive.namelist()
        assert derived["turn_versions"][0]["output_body"] == "an older answer"
        assert derived["running_summary"]["text"] == "they asked"
        assert {p["sk"] for p in prefs} == {"PREF#memory", "PREF#instructions"}
        assert sum(n.endswith(".json") and n.startswith("chats/") and "derived" not in n for n in names) == 2


class TestAPurgeKilledBeforeItsObjects:
    """purge-user deletes the items, then the user's objects: a crash in between must be resumable, and `check`
    must count the objects instead of vouching for them."""

    @pytest.fixture
    def folder_store(self, client, table, meter, tmp_path, monkeypatch, cli):
        from lib.embedded.objects import FolderObjects
        from tests.objects_helpers import store_with

        folder = tmp_path / "objects"
        monkeypatch.setenv("CHAT_OBJECTS_DIR", str(folder))
        return store_with(client, table, meter, FolderObjects(folder)), folder

    @staticmethod
    def files(folder):
        return [p for p in folder.rglob("*") if p.is_file() and ".tmp" not in p.parts]

    @staticmethod
    def killed_between_items_and_objects(store, monkeypatch):
        """Run purge-user with its object step killed, then put the real step back."""
        cls = type(store.bodies)
        real = cls.purge_user

        def killed(self, user_id, *, dry_run):
            raise KeyboardInterrupt("killed between the items and the objects")

        monkeypatch.setattr(cls, "purge_user", killed)
        with pytest.raises(KeyboardInterrupt):
            admin.main(["purge-user", "--user", ANN])
        monkeypatch.setattr(cls, "purge_user", real)

    def test_check_counts_the_objects_left_and_exits_1(self, folder_store, monkeypatch, capsys):
        store, folder = folder_store
        store.create_session(ANN, "A" * 40_000, system_prompt_id="p")
        self.killed_between_items_and_objects(store, monkeypatch)
        capsys.readouterr()
        assert len(self.files(folder)) == 1
        assert admin.main(["check", "--user", ANN]) == 1
        out = capsys.readouterr().out
        assert "nothing left" not in out and "no object" not in out
        assert f"{ANN}: LEFT:" in out and "1 objects" in out

    def test_a_rerun_finishes_the_object_step_and_then_check_proves_none_is_left(
        self, folder_store, monkeypatch, capsys
    ):
        store, folder = folder_store
        store.create_session(ANN, "A" * 40_000, system_prompt_id="p")
        _, bobs = store.create_session(BOB, "B" * 40_000, system_prompt_id="p")
        self.killed_between_items_and_objects(store, monkeypatch)
        capsys.readouterr()
        assert admin.main(["purge-user", "--user", ANN, "--json"]) == 0
        captured = capsys.readouterr()
        report = json.loads(captured.out)
        assert report["objects"] == 1 and report["left"]["objects"] == 0 and report["sessions"] == 0
        assert "earlier purge" in captured.err
        assert [p.name for p in self.files(folder)] == [bobs.input_ref.key.rsplit("/", 1)[-1]]
        assert admin.main(["check", "--user", ANN]) == 0
        assert "nothing left" in capsys.readouterr().out
        # with nothing left anywhere, a third run is a typo's answer again: no such user
        assert admin.main(["purge-user", "--user", ANN]) == 2
        assert "no such user" in capsys.readouterr().err

    def test_without_an_object_store_the_line_says_so_instead_of_no_object(self):
        from lib.ops.audit_report import Leftovers, leftovers_line

        line = leftovers_line(Leftovers(ANN, 0, False, 0, False, objects=None))
        assert "nothing left" in line and "no object store is configured" in line and "no object (" not in line
        assert "no object (" in leftovers_line(Leftovers(ANN, 0, False, 0, False, objects=0))
