"""`python -m lib.admin backup / restore / export-table / import-table`: data out and back, nothing lost or doubled."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lib import admin
from lib.database import stop_local_server
from tests.test_embedded_disk import Folder


@pytest.fixture
def env(monkeypatch, tmp_path):
    """Admin commands on the local backend, table 'chat', folder tmp/data."""
    monkeypatch.setenv("CHAT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("CHAT_TABLE", "chat")
    yield tmp_path / "data"
    stop_local_server(str(tmp_path / "data"))
    stop_local_server(str(tmp_path / "other"))


def run(*argv: str, capsys) -> tuple[int, str]:
    status = admin.main(list(argv))
    captured = capsys.readouterr()
    said = [line for line in (captured.out + captured.err).splitlines() if not line.startswith('{"time"')]
    return status, "\n".join(said).strip()  # the JSON log lines (the audit trail's among them) left out


def filled(path: Path, n: int = 30) -> Folder:
    folder = Folder(path, "chat").start()
    for i in range(n):
        folder.put(f"USER#{i % 3}", f"SES#{i:03d}", title=f"chat {i}", n=i)
    return folder


class TestBackupAndRestore:
    def test_a_backup_taken_while_the_app_runs_restores_every_item(self, env, tmp_path, capsys):
        app = filled(env)  # the app keeps running, holding the folder
        try:
            status, out = run("backup", "--out", str(tmp_path / "b.sqlite3"), capsys=capsys)
            assert status == 0 and out.startswith(f"Backed up 30 items in 1 table from {env}/chat.sqlite3")
            expected = app.everything()
            status, out = run("restore", str(tmp_path / "b.sqlite3"), capsys=capsys)
            assert status == 2 and "in use by another process" in out  # never under a running app
        finally:
            app.stop()
        os.environ["CHAT_DATA_DIR"] = str(tmp_path / "other")
        status, out = run("restore", str(tmp_path / "b.sqlite3"), capsys=capsys)
        assert status == 0 and out == f"Restored 30 items in 1 table from {tmp_path}/b.sqlite3 into {tmp_path}/other/."
        restored = Folder(tmp_path / "other", "chat").start()
        try:  # every item, and the audit record of the restore (written into the database it restored)
            items = restored.everything()
            assert {k: v for k, v in items.items() if not k[0].startswith("AUDIT#")} == expected and len(items) == 31
        finally:
            restored.stop()

    def test_a_damaged_database_comes_back_from_its_backup_with_force_and_the_damaged_file_is_kept(
        self, env, tmp_path, capsys
    ):
        filled(env).stop()
        assert run("backup", "--out", str(tmp_path / "b.sqlite3"), capsys=capsys)[0] == 0
        db = env / "chat.sqlite3"
        data = bytearray(db.read_bytes())
        data[2 * 4096 : 4 * 4096] = os.urandom(2 * 4096)
        db.write_bytes(bytes(data))
        status, out = run("restore", str(tmp_path / "b.sqlite3"), capsys=capsys)
        assert status == 2 and out.startswith(f"{env}/ already holds a database") and "--force" in out
        status, out = run("restore", str(tmp_path / "b.sqlite3"), "--force", capsys=capsys)
        assert status == 0 and "the replaced database is kept as chat.sqlite3.replaced-" in out
        assert len(list(env.glob("chat.sqlite3.replaced-*"))) == 1
        folder = Folder(env, "chat").start()
        try:
            assert len(folder.everything()) == 31  # and the restore's audit record
        finally:
            folder.stop()

    def test_a_backup_never_overwrites_a_file(self, env, tmp_path, capsys):
        filled(env).stop()
        (tmp_path / "b.sqlite3").write_text("precious")
        status, out = run("backup", "--out", str(tmp_path / "b.sqlite3"), capsys=capsys)
        assert status == 2 and "already exists" in out
        assert (tmp_path / "b.sqlite3").read_text() == "precious"

    def test_restoring_something_that_is_not_a_backup_is_refused(self, env, tmp_path, capsys):
        (tmp_path / "notes.txt").write_text("hello " * 1000)
        status, out = run("restore", str(tmp_path / "notes.txt"), capsys=capsys)
        assert status == 2 and "is not a backup of the local database" in out
        assert not env.exists() or not (env / "chat.sqlite3").exists()


class TestExportImport:
    def test_a_table_moves_to_another_database_item_for_item(self, env, tmp_path, capsys):
        source = filled(env, 60)
        expected = source.everything()
        source.stop()
        status, out = run("export-table", "--out", str(tmp_path / "chat.jsonl"), capsys=capsys)
        # the 60 items and the audit record of this export's start (written before it read the table)
        assert status == 0 and out.startswith("Exported 61 items")
        lines = (tmp_path / "chat.jsonl").read_text(encoding="utf-8").splitlines()
        assert len(lines) == 61 and all(set(json.loads(line)) == {"Item"} for line in lines)
        stop_local_server(str(env))
        os.environ["CHAT_DATA_DIR"] = str(tmp_path / "other")
        status, out = run("import-table", str(tmp_path / "chat.jsonl"), capsys=capsys)
        assert status == 0 and out.startswith("Imported 61 items")
        status, out = run("import-table", str(tmp_path / "chat.jsonl"), capsys=capsys)
        assert status == 2 and "already holds items" in out and "--merge" in out
        stop_local_server(str(tmp_path / "other"))
        target = Folder(tmp_path / "other", "chat").start()
        try:
            # every item, and the audit records of the export's start and of the import
            moved = {key: item for key, item in target.everything().items() if not key[0].startswith("AUDIT#")}
            assert moved == expected and len(target.everything()) == 62
        finally:
            target.stop()

    def test_a_bad_line_is_named_and_nothing_is_imported(self, env, tmp_path, capsys):
        good = json.dumps({"Item": {"pk": {"S": "USER#a"}, "sk": {"S": "SES#1"}}})
        (tmp_path / "in.jsonl").write_text(good + "\n" + '{"Item": {"pk": "not typed"}}\n' + good + "\n")
        status, out = run("import-table", str(tmp_path / "in.jsonl"), capsys=capsys)
        assert status == 2 and out.startswith(f"Line 2 of {tmp_path}/in.jsonl is not an exported item")
        assert not (env / "chat.sqlite3").exists()  # refused before the database was even opened
