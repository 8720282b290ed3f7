"""The embedded server's SQLite disk: lazy partitions, letting go, Scan and counts from disk, and never half-started."""

from __future__ import annotations

import contextlib
import gc
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
from botocore.exceptions import ClientError

from lib.config import Settings
from lib.database import _local_servers, local_client, open_database
from lib.embedded import partitions
from lib.embedded.server import LocalDynamo, moto_backend
from lib.errors import ConfigError, StoreUnavailable
from lib.storage.schema import create_table
from lib.storage.store import to_item


class Folder:
    """A data folder served by an in-process LocalDynamo, with one table of its own; `restart` is a new start."""

    def __init__(self, path: Path, table: str | None = None):
        self.path = path
        self.table = table or f"t-{uuid.uuid4().hex[:10]}"
        self.server: LocalDynamo | None = None
        self.client: Any = None

    def start(self) -> "Folder":
        self.server = LocalDynamo(self.path).start()
        self.client = local_client(self.server)
        if self.table not in self.server.tables:
            create_table(self.client, self.table, wait=False)
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def restart(self) -> "Folder":
        self.stop()
        return self.start()

    @property
    def moto_table(self) -> Any:
        return moto_backend("us-east-1").tables[self.table]

    def put(self, pk: str, sk: str, **values: Any) -> None:
        self.client.put_item(TableName=self.table, Item=to_item({"pk": pk, "sk": sk, **values}))

    def get(self, pk: str, sk: str) -> dict | None:
        return self.client.get_item(TableName=self.table, Key=to_item({"pk": pk, "sk": sk}), ConsistentRead=True).get(
            "Item"
        )

    def everything(self) -> dict[tuple[str, str], dict]:
        """Every item, by a paged Scan."""
        out, start = {}, None
        while True:
            params: dict = {"TableName": self.table}
            if start:
                params["ExclusiveStartKey"] = start
            page = self.client.scan(**params)
            out.update({(i["pk"]["S"], i["sk"]["S"]): i for i in page["Items"]})
            start = page.get("LastEvaluatedKey")
            if not start:
                return out


@pytest.fixture
def folder(tmp_path, no_backoff_sleep) -> Iterator[Folder]:
    f = Folder(tmp_path / "data").start()
    yield f
    f.stop()


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A real small filesystem (root and a kernel that allows it), else the test is skipped."""
    path.mkdir(parents=True, exist_ok=True)
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


class TestLazyPartitions:
    def test_start_loads_nothing_and_a_query_builds_only_its_page(self, folder):
        for user in "abc":
            for i in range(5):
                folder.put(f"USER#{user}", f"SES#{i}")
        folder.restart()
        assert dict.__len__(folder.moto_table.items) == 0
        page = folder.client.query(
            TableName=folder.table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues=to_item({":pk": "USER#b"}),
            ScanIndexForward=False,
            Limit=3,
            ConsistentRead=True,
        )
        assert [i["sk"]["S"] for i in page["Items"]] == ["SES#4", "SES#3", "SES#2"]
        loaded = dict(dict.items(folder.moto_table.items))
        assert [k.value for k in loaded] == ["USER#b"] and len(next(iter(loaded.values()))) == 3

    def test_idle_partitions_are_let_go_and_come_back_unchanged(self, folder, monkeypatch):
        monkeypatch.setattr(partitions, "MEMORY_ITEMS", 6)
        monkeypatch.setattr(partitions.LazyPartitions.trim, "__defaults__", (6,))
        for user in range(5):
            for i in range(3):
                folder.put(f"USER#{user}", f"SES#{i}", n=user * 10 + i)
        folder.restart()
        for user in range(5):
            page = folder.client.query(
                TableName=folder.table,
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues=to_item({":pk": f"USER#{user}"}),
            )
            assert [i["n"]["N"] for i in page["Items"]] == [str(user * 10 + i) for i in range(3)]
            held = sum(len(p) for p in dict.values(folder.moto_table.items))
            assert held <= 6
        assert [k.value for k in dict.keys(folder.moto_table.items)] == ["USER#3", "USER#4"]
        assert folder.get("USER#0", "SES#2")["n"] == {"N": "2"}  # reloaded from disk

    def test_a_scan_and_the_item_count_read_the_disk_without_loading_partitions(self, folder):
        expected = set()
        for user in range(7):
            for i in range(4):
                folder.put(f"USER#{user}", f"MSG#{i}", body="x" * 100)
                expected.add((f"USER#{user}", f"MSG#{i}"))
        folder.restart()
        keys, start, pages = [], None, 0
        while True:
            params = {"TableName": folder.table, "Limit": 5}
            if start:
                params["ExclusiveStartKey"] = start
            page = folder.client.scan(**params)
            pages += 1
            keys += [(i["pk"]["S"], i["sk"]["S"]) for i in page["Items"]]
            start = page.get("LastEvaluatedKey")
            if not start:
                break
        assert keys == sorted(expected) and pages == 6
        assert folder.client.describe_table(TableName=folder.table)["Table"]["ItemCount"] == 28
        assert dict.__len__(folder.moto_table.items) == 0

    def test_loaded_items_are_moved_out_of_the_garbage_collectors_way(self, folder, monkeypatch):
        monkeypatch.setattr(partitions, "FREEZE_AFTER_ITEMS", 10)
        for i in range(12):
            folder.put("USER#a", f"SES#{i:02d}")
        folder.restart()
        gc.unfreeze()
        assert gc.get_freeze_count() == 0
        folder.client.query(  # builds the 12 items of the partition
            TableName=folder.table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues=to_item({":pk": "USER#a"}),
        )
        assert gc.get_freeze_count() > 0
        gc.unfreeze()

    def test_the_app_turns_off_streamlits_full_collection_after_every_script_run(self, monkeypatch):
        """Items written since start-up are not frozen: a gc.collect(2) per page walked all of them (a send at
        turn 440 of one chat: 425 ms). Read through Streamlit's own parser, from the file `streamlit run` and the
        Dockerfile use, so a misspelt section or key would fail here rather than be ignored."""
        from pathlib import Path

        from streamlit import config

        monkeypatch.chdir(Path(__file__).resolve().parents[1])
        try:
            config.get_config_options(force_reparse=True)
            assert config.get_option("runner.postScriptGC") is False
            assert Path(config.get_where_defined("runner.postScriptGC")).parts[-2:] == (".streamlit", "config.toml")
        finally:
            config.get_config_options(force_reparse=True)


class TestSync:
    def test_a_commit_is_checkpointed_to_disk_within_the_sync_interval(self, folder):
        import time

        folder.put("P", "synced")
        assert folder.server.disk.unsynced
        deadline = time.monotonic() + 300  # a bound for a loaded machine; the interval is 1 s
        while folder.server.disk.unsynced and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not folder.server.disk.unsynced
        assert (folder.path / "chat.sqlite3").stat().st_size > 4096 * 3  # the item reached the database file


class TestNeverHalfStarted:
    def test_a_data_dir_that_is_a_file_is_a_sentence_naming_it(self, tmp_path):
        path = tmp_path / "data"
        path.write_text("not a folder")
        with pytest.raises(ConfigError, match=f"CHAT_DATA_DIR {path} is a file, not a folder"):
            LocalDynamo(path).start()

    def test_a_damaged_database_is_refused_on_every_page_until_restored(self, folder, tmp_path):
        for i in range(300):
            folder.put(f"USER#{i % 10}", f"SES#{i:04d}", body="y" * 200)
        folder.stop()
        db = folder.path / "chat.sqlite3"
        data = bytearray(db.read_bytes())
        assert len(data) > 8 * 4096
        data[3 * 4096 : 6 * 4096] = os.urandom(3 * 4096)  # three pages of the items b-tree
        db.write_bytes(bytes(data))
        settings = Settings.load(env={"CHAT_DATA_DIR": str(folder.path)}, secrets={})
        for _ in range(2):  # the next page load sees the same sentence, never an empty sidebar
            with pytest.raises(StoreUnavailable, match=f"{folder.path}/chat.sqlite3 is damaged.*lib.admin restore"):
                open_database(settings)
        assert str(folder.path) not in _local_servers
        assert folder.table not in moto_backend("us-east-1").tables

    def test_a_folder_that_cannot_be_created_is_a_sentence_naming_it(self, tmp_path):
        blocker = tmp_path / "file"
        blocker.write_text("")
        with pytest.raises(StoreUnavailable, match=f"{blocker}/data/ cannot be created .*CHAT_DATA_DIR"):
            LocalDynamo(blocker / "data").start()

    def test_a_lock_file_that_is_a_folder_is_a_sentence(self, tmp_path):
        (tmp_path / "data" / "lock").mkdir(parents=True)
        with pytest.raises(ConfigError, match="lock is a folder"):
            LocalDynamo(tmp_path / "data").start()


class TestWritesThatFail:
    def test_a_deleted_lock_file_stops_writes_with_a_sentence_and_changes_nothing(self, folder):
        folder.put("p", "kept")
        (folder.path / "lock").unlink()
        with pytest.raises(ClientError, match=r"InternalServerError.*lock was deleted while the app was running"):
            folder.put("p", "refused")
        assert folder.get("p", "refused") is None
        folder.restart()
        assert set(folder.everything()) == {("p", "kept")}

    def test_a_write_moto_refuses_half_way_is_undone_from_disk(self, folder):
        folder.put("p", "m", m={"a": "x"})
        with pytest.raises(ClientError, match="maximum allowed size"):
            folder.client.update_item(
                TableName=folder.table,
                Key=to_item({"pk": "p", "sk": "m"}),
                UpdateExpression="SET m.b = :b, c = :c",
                ExpressionAttributeValues=to_item({":b": "y" * 300_000, ":c": "z" * 300_000}),
            )
        assert folder.get("p", "m") == to_item({"pk": "p", "sk": "m", "m": {"a": "x"}})


class TestEveryPage:
    @pytest.mark.parametrize("page", ["app.py", "pages/cost.py"])
    def test_a_damaged_database_is_the_same_sentence_on_every_load_never_an_empty_sidebar(
        self, tmp_path, monkeypatch, page
    ):
        from streamlit.testing.v1 import AppTest

        folder = Folder(tmp_path / "data", "chat").start()
        for i in range(200):
            folder.put(f"USER#{i % 5}", f"SES#{i:04d}", body="y" * 300)
        folder.stop()
        db = folder.path / "chat.sqlite3"
        data = bytearray(db.read_bytes())
        data[2 * 4096 : 5 * 4096] = os.urandom(3 * 4096)
        db.write_bytes(bytes(data))
        monkeypatch.setenv("CHAT_DATA_DIR", str(folder.path))
        monkeypatch.setenv("CHAT_TABLE", "chat")
        for _ in range(2):  # a reload tries again and says the same
            at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / page), default_timeout=300).run()
            assert not at.exception
            assert [e.value for e in at.error if "is damaged" in e.value] == [
                next(e.value for e in at.error if "is damaged" in e.value)
            ]
            assert f"{db} is damaged" in at.error[0].value and "python -m lib.admin restore" in at.error[0].value
            assert not [b for b in at.sidebar.button if b.key and b.key.startswith("open-")] and not at.chat_input


class TestTables:
    def test_table_requests_are_kept_as_sent_and_a_deleted_table_stays_deleted(self, folder):
        folder.client.update_time_to_live(
            TableName=folder.table, TimeToLiveSpecification={"Enabled": True, "AttributeName": "expire_at"}
        )
        other = f"{folder.table}-other"
        create_table(folder.client, other, wait=False)
        folder.client.put_item(TableName=other, Item=to_item({"pk": "p", "sk": "s"}))
        folder.client.delete_table(TableName=other)
        folder.restart()
        ttl = folder.client.describe_time_to_live(TableName=folder.table)["TimeToLiveDescription"]
        assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "expire_at"}
        assert folder.server.tables == [folder.table]
        create_table(folder.client, other, wait=False)  # made again: empty, not the deleted table's items
        assert folder.client.scan(TableName=other)["Items"] == []
        folder.client.delete_table(TableName=other)


class TestCancelledTransactions:
    def test_a_cancelled_transaction_changes_nothing_and_keeps_its_partitions_loaded(self, folder):
        from botocore.exceptions import ClientError as Refused

        folder.put("USER#a", "SES#1", v=1)
        folder.put("USER#a", "SES#2", v=1)
        folder.restart()
        assert folder.get("USER#a", "SES#1")["v"] == {"N": "1"}
        partition = dict.get(folder.moto_table.items, next(iter(dict.keys(folder.moto_table.items))))
        with pytest.raises(Refused, match="TransactionCanceled"):
            folder.client.transact_write_items(
                TransactItems=[
                    {
                        "Update": {
                            "TableName": folder.table,
                            "Key": to_item({"pk": "USER#a", "sk": "SES#1"}),
                            "UpdateExpression": "SET v = :two",
                            "ExpressionAttributeValues": to_item({":two": 2}),
                        }
                    },
                    {
                        "Put": {
                            "TableName": folder.table,
                            "Item": to_item({"pk": "USER#a", "sk": "SES#2"}),
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                ]
            )
        assert next(iter(dict.values(folder.moto_table.items))) is partition  # undone in place, not reloaded
        assert folder.get("USER#a", "SES#1")["v"] == {"N": "1"}
        folder.restart()
        assert {k: v["v"]["N"] for k, v in folder.everything().items()} == {
            ("USER#a", "SES#1"): "1",
            ("USER#a", "SES#2"): "1",
        }
