"""The old journal (`snapshot.jsonl` + `journal.jsonl`) is imported once, strictly, and kept renamed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lib.config import Settings
from lib.database import open_database, stop_local_server
from lib.embedded.disk import Disk
from lib.embedded.migrate import import_journal
from lib.errors import StoreUnavailable


def line(*writes: tuple[str, str, str, dict | None]) -> str:
    """One request as the old server appended it: {"w": [[table, key, final image or null], ...]}."""
    return (
        json.dumps(
            {
                "w": [
                    [
                        table,
                        {"pk": {"S": pk}, "sk": {"S": sk}},
                        None if image is None else {"pk": {"S": pk}, "sk": {"S": sk}, **image},
                    ]
                    for table, pk, sk, image in writes
                ]
            },
            ensure_ascii=False,
        )
        + "\n"
    )


@pytest.fixture
def old_folder(tmp_path) -> Path:
    """A folder as the journal left it: a compacted snapshot, then three requests in the journal."""
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "snapshot.jsonl").write_text(
        line(("chat", "USER#u-1", "SES#1", {"title": {"S": "première"}}))
        + line(("chat", "USER#u-1", "SES#2", {"title": {"S": "gone"}})),
        encoding="utf-8",
    )
    (folder / "journal.jsonl").write_text(
        line(("chat", "USER#u-1", "SES#2", None))
        + line(
            ("chat", "USER#u-1", "SES#3", {"title": {"S": "later"}}),
            ("chat", "USER#u-1#SES#3", "SES#META", {"message_count": {"N": "1"}}),
        )
        + line(("chat", "USER#u-1", "SES#1", {"title": {"S": "renamed"}})),
        encoding="utf-8",
    )
    return folder


def titles(folder: Path) -> dict[str, str]:
    database = open_database(Settings.load(env={"CHAT_DATA_DIR": str(folder)}, secrets={}))
    try:
        items = database.client.scan(TableName="chat")["Items"]
        return {i["sk"]["S"]: i.get("title", i.get("message_count"))["S" if "title" in i else "N"] for i in items}
    finally:
        stop_local_server(str(folder))


class TestImport:
    def test_the_last_image_of_every_item_is_imported_and_the_old_files_are_kept_renamed(self, old_folder):
        assert titles(old_folder) == {"SES#1": "renamed", "SES#3": "later", "SES#META": "1"}
        assert sorted(p.name for p in old_folder.iterdir() if "jsonl" in p.name) == [
            "journal.jsonl.imported",
            "snapshot.jsonl.imported",
        ]
        assert titles(old_folder) == {"SES#1": "renamed", "SES#3": "later", "SES#META": "1"}  # once only

    def test_a_torn_last_journal_line_was_never_acknowledged_and_is_left_out(self, old_folder):
        journal = old_folder / "journal.jsonl"
        torn = line(("chat", "USER#u-1", "SES#9", {"title": {"S": "né"}})).encode("utf-8")
        journal.write_bytes(journal.read_bytes() + torn[: torn.index("é".encode()) + 1])  # inside a 2-byte character
        assert titles(old_folder) == {"SES#1": "renamed", "SES#3": "later", "SES#META": "1"}

    def test_an_import_interrupted_before_the_rename_finishes_without_importing_twice(self, old_folder):
        disk = Disk.open(old_folder)
        try:
            import_journal(disk)
        finally:
            disk.close()
        for name in ("snapshot.jsonl", "journal.jsonl"):  # as if the process died right after the commit
            (old_folder / f"{name}.imported").rename(old_folder / name)
        assert titles(old_folder) == {"SES#1": "renamed", "SES#3": "later", "SES#META": "1"}
        assert (old_folder / "journal.jsonl.imported").exists() and not (old_folder / "journal.jsonl").exists()


class TestStrict:
    @pytest.mark.parametrize(
        "bad, why",
        [
            (b'{"w": [["chat", {"pk": {"S": "x"}}\n', "JSONDecodeError"),
            (b'{"w": [["chat", {"pk": {"S": "\xff\xfe"}}, null]]}\n', "UnicodeDecodeError"),
            (b'{"x": 1}\n', "KeyError"),
            (b'{"w": [["chat", "not a key", null]]}\n', "TypeError"),
        ],
    )
    def test_a_bad_middle_line_stops_the_import_with_its_number_and_imports_nothing(self, old_folder, bad, why):
        journal = old_folder / "journal.jsonl"
        lines = journal.read_bytes().splitlines(keepends=True)
        journal.write_bytes(lines[0] + bad + b"".join(lines[1:]))
        before = {p.name: p.read_bytes() for p in old_folder.iterdir()}
        settings = Settings.load(env={"CHAT_DATA_DIR": str(old_folder)}, secrets={})
        with pytest.raises(
            StoreUnavailable,
            match=rf"Line 2 of {journal} cannot be read \({why}.*nothing was.*"
            r"fix or delete that line",
        ):
            open_database(settings)
        after = {p.name: p.read_bytes() for p in old_folder.iterdir() if p.name in before}
        assert after == before  # the old files are unchanged
        disk = Disk.open(old_folder)
        try:
            assert not disk.has_items() and not disk.table_requests()
        finally:
            disk.close()
        lines = journal.read_bytes().splitlines(keepends=True)
        journal.write_bytes(lines[0] + b"".join(lines[2:]))  # the operator deletes the line
        assert titles(old_folder) == {"SES#1": "renamed", "SES#3": "later", "SES#META": "1"}

    def test_a_snapshot_cut_mid_line_is_refused(self, old_folder):
        snapshot = old_folder / "snapshot.jsonl"
        snapshot.write_bytes(snapshot.read_bytes()[:-20])
        with pytest.raises(StoreUnavailable, match=rf"Line 2 of {snapshot} cannot be read \(it ends in the middle"):
            titles(old_folder)

    def test_a_journal_without_its_snapshot_is_refused(self, old_folder):
        (old_folder / "snapshot.jsonl").unlink()
        with pytest.raises(StoreUnavailable, match="snapshot.jsonl is missing, but .*journal.jsonl is not empty"):
            titles(old_folder)


OLD_WRITER = """
import sys
sys.path.insert(0, sys.argv[1])
from old_embedded.server import LocalDynamo
from lib.database import local_client
from lib.storage.schema import create_table
from lib.storage.store import ChatStore
server = LocalDynamo(sys.argv[2]).start()
client = local_client(server)
create_table(client, "chat", vector_dimensions=None)  # the journal era had no vector index
server.restore(lambda name: None)
store = ChatStore(client, "chat", cursor_secret="x")
for i in range(4):
    session, message = store.create_session("u-1", f"question {i} é👋", system_prompt_id="p")
    store.finish_message("u-1", message, output_body="answer", input_token=1, output_token=1,
                         response_start_time=message.create_time, response_end_time=message.create_time)
store.rename_session("u-1", store.get_session("u-1", session.session_id), "renamed")
server.stop()
"""


class TestFromTheRealJournal:
    def test_a_folder_written_by_the_journal_implementation_opens_with_every_chat(self, tmp_path):
        """The journal code itself, from git history (commit 937fb9b), writes the folder."""
        import subprocess
        import sys

        root = Path(__file__).resolve().parents[1]
        package = tmp_path / "old" / "old_embedded"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")
        for name in ("server.py", "moto_patches.py"):
            shown = subprocess.run(
                ["git", "show", f"937fb9b:lib/embedded/{name}"], cwd=root, capture_output=True, text=True
            )
            if shown.returncode != 0:
                pytest.skip("commit 937fb9b is not in this clone's history")
            (package / name).write_text(
                shown.stdout.replace("from lib.embedded import moto_patches", "from old_embedded import moto_patches")
            )
        folder = tmp_path / "data"
        subprocess.run(
            [sys.executable, "-c", OLD_WRITER, str(tmp_path / "old"), str(folder)],
            cwd=root,
            check=True,
            capture_output=True,
            timeout=120,
        )
        database = open_database(Settings.load(env={"CHAT_DATA_DIR": str(folder)}, secrets={}))
        try:
            store = database.store()
            assert [s.title for s in store.list_sessions("u-1").items] == [
                "renamed",
                "question 2 é👋",
                "question 1 é👋",
                "question 0 é👋",
            ]
            assert [
                (m.input_body, m.output_body)
                for m in store.all_messages("u-1", store.list_sessions("u-1").items[0].session_id)
            ] == [("question 3 é👋", "answer")]
        finally:
            stop_local_server(str(folder))
