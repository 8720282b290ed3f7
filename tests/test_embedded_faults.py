"""The fault matrix of the embedded database: after each fault, every acknowledged write is there after a
restart, and nothing else (a refused write changed nothing, in memory or on disk)."""

from __future__ import annotations

import random
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from lib.embedded import disk
from lib.embedded.server import LocalDynamo
from lib.errors import StoreUnavailable
from lib.storage.store import ChatStore
from tests.test_embedded_disk import Folder, tmpfs

ROOT = Path(__file__).resolve().parents[1]


def write_until_refused(folder: Folder, prefix: str, limit: int, size: int) -> tuple[list[tuple[str, str]], str]:
    """Put items until one is refused; (acknowledged keys, the refusal's message)."""
    acked = []
    for i in range(limit):
        key = ("P", f"{prefix}#{i:04d}")
        try:
            folder.put(*key, body="x" * size)
        except ClientError as exc:
            assert exc.response["Error"]["Code"] == "InternalServerError"
            assert folder.get(*key) is None  # refused: not in memory either
            return acked, exc.response["Error"]["Message"]
        acked.append(key)
    raise AssertionError(f"no write was refused in {limit}")


class _FullDisk:
    """An SQLite connection whose COMMIT fails ('disk is full', or `refusal`) while `full` is set."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db
        self.full = False
        self.refusal = sqlite3.OperationalError("database or disk is full")

    def execute(self, sql: str, params: tuple = ()) -> sqlite3.Cursor:
        if self.full and sql == "COMMIT":
            raise self.refusal
        return self.db.execute(sql, params)

    def __getattr__(self, name: str):
        return getattr(self.db, name)


class TestDiskFull:
    def test_on_a_real_2_mb_filesystem_refused_writes_change_nothing_and_freed_space_is_used(
        self, tmp_path, no_backoff_sleep
    ):
        with tmpfs(tmp_path / "mnt", "2m") as mount:
            filler = mount / "filler"
            filler.write_bytes(b"\0" * 512 * 1024)
            folder = Folder(mount / "data").start()
            try:
                acked, message = write_until_refused(folder, "A", 400, 20_000)
                assert message.startswith(f"The disk holding the local database {mount}/data/ is full")
                assert len(acked) > 10
                filler.unlink()  # the user frees space
                for i in range(5):
                    folder.put("P", f"B#{i}", body="z" * 20_000)
                    acked.append(("P", f"B#{i}"))
                folder.restart()
                assert sorted(folder.everything()) == sorted(acked)
            finally:
                folder.stop()

    def test_injected_the_store_says_not_saved_and_nothing_half_done_survives(self, tmp_path, no_backoff_sleep):
        folder = Folder(tmp_path / "data").start()
        try:
            store = ChatStore(folder.client, folder.table, cursor_secret="s")
            first, _ = store.create_session("u-1", "saved before the disk filled", system_prompt_id="p")
            disk = folder.server.disk
            disk._db = _FullDisk(disk._db)
            disk._db.full = True
            with pytest.raises(StoreUnavailable, match="not saved"):
                store.create_session("u-1", "refused while the disk is full", system_prompt_id="p")
            with pytest.raises(ClientError, match="InternalServerError"):
                folder.put("P", "refused")
            assert [s.session_id for s in store.list_sessions("u-1").items] == [first.session_id]
            disk._db.full = False
            second, _ = store.create_session("u-1", "saved after space was freed", system_prompt_id="p")
            before = folder.everything()
            folder.restart()
            store = ChatStore(folder.client, folder.table, cursor_secret="s")
            assert [s.session_id for s in store.list_sessions("u-1").items] == [second.session_id, first.session_id]
            assert folder.everything() == before
            turns = [item["input_body"]["S"] for (_, sk), item in before.items() if sk.startswith("MSG#")]
            assert sorted(turns) == ["saved after space was freed", "saved before the disk filled"]
        finally:
            folder.stop()


WRITER = textwrap.dedent("""
    import sys
    from lib.embedded.server import LocalDynamo
    from lib.database import local_client
    from lib.storage.schema import create_table

    folder, table, round_ = sys.argv[1], sys.argv[2], sys.argv[3]
    server = LocalDynamo(folder).start()
    client = local_client(server)
    if table not in server.tables:
        create_table(client, table, wait=False)
    print("ready", flush=True)
    i = 0
    while True:
        item = {"pk": {"S": "R#" + round_}, "sk": {"S": "I#%06d" % i}, "body": {"S": "x" * (i % 7 * 700)}}
        counter = {"pk": {"S": "COUNTER"}, "sk": {"S": "R#" + round_}}
        if i % 2:  # a batch of two Puts
            client.batch_write_item(RequestItems={table: [{"PutRequest": {"Item": item}},
                                                          {"PutRequest": {"Item": {**counter, "n": {"N": str(i)}}}}]})
        else:  # a transaction: the Put and the counter's Update
            client.transact_write_items(TransactItems=[
                {"Put": {"TableName": table, "Item": item}},
                {"Update": {"TableName": table, "Key": counter, "UpdateExpression": "SET n = :n",
                            "ExpressionAttributeValues": {":n": {"N": str(i)}}}}])
        print(i, flush=True)
        i += 1
""")


class TestKilled:
    def test_kill_9_at_random_points_in_20_rounds_loses_no_acknowledged_write(self, tmp_path, no_backoff_sleep):
        data, table, rng = tmp_path / "data", "killed", random.Random(9)
        acked: dict[int, list[int]] = {}
        for round_ in range(20):
            writer = subprocess.Popen(
                [sys.executable, "-c", WRITER, str(data), table, str(round_)],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            assert writer.stdout.readline().strip() == "ready", writer.stderr.read()
            time.sleep(rng.uniform(0.02, 0.4))
            writer.kill()  # SIGKILL: no shutdown, no checkpoint
            writer.wait()
            acked[round_] = [int(line) for line in writer.stdout.read().split()]
            writer.stdout.close()
            writer.stderr.close()
        folder = Folder(data, table).start()
        try:
            stored = folder.everything()
        finally:
            folder.stop()
        assert sum(len(ids) for ids in acked.values()) > 100
        for round_, ids in acked.items():
            present = sorted(int(sk[2:]) for pk, sk in stored if pk == f"R#{round_}")
            # every acknowledged write; at most the one in flight when killed, if it committed
            assert present[: len(ids)] == ids == list(range(len(ids)))
            assert present in (ids, ids + [len(ids)])
            counter = stored.get(("COUNTER", f"R#{round_}"))
            assert (int(counter["n"]["N"]) if counter else -1) == (present[-1] if present else -1)  # atomic
        allowed = {(f"R#{r}", f"I#{i:06d}") for r, ids in acked.items() for i in range(len(ids) + 1)}
        assert set(stored) <= allowed | {("COUNTER", f"R#{r}") for r in acked}  # and nothing else


class TestReadOnly:
    def test_a_folder_turned_read_only_while_running_refuses_writes_with_a_sentence_then_recovers(
        self, tmp_path, no_backoff_sleep
    ):
        # A mounted filesystem cannot be remounted read-only under open files, so SQLite's refusal is injected.
        folder = Folder(tmp_path / "data").start()
        try:
            folder.put("P", "before")
            disk = folder.server.disk
            disk._db = _FullDisk(disk._db)
            disk._db.refusal = sqlite3.OperationalError("attempt to write a readonly database")
            disk._db.full = True
            with pytest.raises(
                ClientError, match=f"InternalServerError.*{folder.path}/ is read-only: make it writable"
            ):
                folder.put("P", "refused")
            assert folder.get("P", "refused") is None
            assert folder.get("P", "before") is not None  # reads go on
            disk._db.full = False
            folder.put("P", "after")
            folder.restart()
            assert sorted(folder.everything()) == [("P", "after"), ("P", "before")]
        finally:
            folder.stop()

    def test_starting_on_a_read_only_folder_is_a_sentence_naming_it(self, tmp_path):
        with tmpfs(tmp_path / "mnt", "16m") as mount:
            folder = Folder(mount / "data").start()
            folder.put("P", "kept")
            folder.stop()
            subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
            with pytest.raises(StoreUnavailable, match=f"{mount}/data/ is read-only: make it writable"):
                LocalDynamo(mount / "data").start()
            subprocess.run(["mount", "-o", "remount,rw", str(mount)], check=True)
            folder.start()
            try:
                assert list(folder.everything()) == [("P", "kept")]
            finally:
                folder.stop()


class TestTornWal:
    def test_an_os_crash_mid_commit_keeps_every_acknowledged_write_and_drops_the_torn_one(self, tmp_path, monkeypatch):
        monkeypatch.setattr(disk, "SYNC_INTERVAL_S", 3600.0)  # no checkpoint while the files are copied
        folder = Folder(tmp_path / "data").start()
        crashed = tmp_path / "crashed"
        crashed.mkdir()
        try:
            for i in range(5):
                folder.put("P", f"{i}", body="w" * 3000)
            wal = folder.path / "chat.sqlite3-wal"
            acknowledged_wal = wal.stat().st_size
            shutil.copy(folder.path / "chat.sqlite3", crashed / "chat.sqlite3")  # unchanged until a checkpoint
            folder.put("P", "torn", body="t" * 3000)  # the machine dies while this commit's frames are written
            frames = wal.read_bytes()
            assert len(frames) > acknowledged_wal
            (crashed / "chat.sqlite3-wal").write_bytes(
                frames[: acknowledged_wal + (len(frames) - acknowledged_wal) // 2]
            )
        finally:
            folder.stop()
        after = Folder(crashed, folder.table).start()
        try:
            assert sorted(after.everything()) == [("P", f"{i}") for i in range(5)]
        finally:
            after.stop()


HOLDER = textwrap.dedent("""
    import sys
    from lib.embedded.server import LocalDynamo
    from lib.database import local_client
    from lib.storage.schema import create_table

    server = LocalDynamo(sys.argv[1]).start()
    client = local_client(server)
    create_table(client, sys.argv[2], wait=False)
    for i in range(3):
        client.put_item(TableName=sys.argv[2], Item={"pk": {"S": "P"}, "sk": {"S": str(i)}})
    print("ready", flush=True)
    sys.stdin.read()  # hold the folder until the test closes our stdin
    server.stop()
""")


class TestTwoProcesses:
    def test_a_second_process_on_the_folder_is_refused_and_the_first_ones_writes_are_kept(self, tmp_path):
        data = tmp_path / "data"
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(data), "held"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout.readline().strip() == "ready", holder.stderr.read()
            with pytest.raises(StoreUnavailable, match=f"{data}/ is in use by another process"):
                LocalDynamo(data).start()
        finally:
            holder.stdin.close()
            assert holder.wait(timeout=30) == 0
            holder.stdout.close()
            holder.stderr.close()
        folder = Folder(data, "held").start()
        try:
            assert sorted(folder.everything()) == [("P", "0"), ("P", "1"), ("P", "2")]
        finally:
            folder.stop()
