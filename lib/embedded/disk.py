"""The embedded server's disk: one SQLite file (stdlib `sqlite3`, WAL) in CHAT_DATA_DIR.

Moto keeps the API; this file is the truth. `items` holds every item's final image
in DynamoDB JSON, keyed by (table, pk, sk); `table_requests` holds the requests that
made and changed each table (CreateTable, UpdateTable, ...), replayed into moto at
start: generic, so a table option moto learns (e.g. vector indexes) is kept as sent.

A write request's final images are committed in ONE SQLite transaction before the
response is sent (lib/embedded/server.py); a commit that fails raises DiskError
with a sentence naming the folder and the fix, and the write is undone in memory.

`synchronous=NORMAL`, chosen by measurement (bench/local_db.py, docs/performance.md): every
commit is in the WAL, in the OS's page cache, before the response, so a killed or
crashed app loses nothing it acknowledged; the WAL is fsynced by a checkpoint at
most SYNC_INTERVAL_S after a write (lib/embedded/server.py runs it), so an OS crash
or power cut loses at most about the last second of acknowledged writes, and the
database always comes back consistent (SQLite's WAL checksums drop a torn tail).
FULL would fsync every commit: +2.6 to +6 ms per write on this project's machine
(50-100% slower writes, against a budget of 20%).

One process owns a folder at a time: an exclusive flock on `lock`; the lock file's
link count is checked before every commit, so a lock file deleted while running
stops writes instead of letting a second process in unnoticed.
"""

from __future__ import annotations

import base64
import errno
import fcntl
import json
import os
import sqlite3
from decimal import Decimal
from pathlib import Path
from typing import Any, Iterator

from lib.errors import ConfigError, StoreUnavailable

SortBound = tuple[str, bool] | None  # (sk, inclusive), None: the partition's end

FILE_NAME = "chat.sqlite3"
LOCK_NAME = "lock"
FORMAT_VERSION = "1"
SYNCHRONOUS = "NORMAL"
SYNC_INTERVAL_S = 1.0  # most time between a commit and the fsync that makes it survive an OS crash
RESTORE_HINT = "python -m lib.admin restore BACKUP_FILE --force"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS table_requests (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, tbl TEXT NOT NULL, operation TEXT NOT NULL, request TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS items (
    tbl TEXT NOT NULL, pk TEXT NOT NULL, sk TEXT NOT NULL, item TEXT NOT NULL,
    PRIMARY KEY (tbl, pk, sk)) WITHOUT ROWID;
-- Keys only: DescribeTable's ItemCount counts 100,000 items in 10 ms here, not 200-500 ms through the rows.
CREATE INDEX IF NOT EXISTS items_by_table ON items (tbl);
-- Items carrying DynamoDB's TTL attribute, by their time: the TTL sweep finds what is due in a few index steps
-- (1 ms at 100,000 items) instead of reading every item (0.8 s), which would stall every request meanwhile.
CREATE INDEX IF NOT EXISTS items_by_expiry ON items (tbl, CAST(json_extract(item, '$."expire_at".N') AS REAL))
    WHERE instr(item, '"expire_at"') > 0;
"""


class DiskError(Exception):
    """The database file refused a read or write; the message is one sentence naming the folder and the fix."""

    @property
    def message(self) -> str:  # moto reads `.message` from errors raised inside a transaction
        return str(self)


def key_text(kind: str, value: Any) -> str:
    """A key attribute's value as stored in the pk/sk column: strings as is, numbers canonical, binary base64."""
    if kind == "N":
        return str(Decimal(value).normalize())
    if kind == "B":
        return value if isinstance(value, str) else base64.b64encode(value).decode("ascii")
    return value


def explain(exc: BaseException, folder: Path) -> str:
    """One sentence for an SQLite or OS error on `folder`: what happened and what to do."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    err = getattr(exc, "errno", None)
    text = str(exc).lower()
    if name == "SQLITE_FULL" or err == errno.ENOSPC or "disk is full" in text:
        return (
            f"The disk holding the local database {folder}/ is full: free some space there (nothing was "
            "changed by the refused write), then try again."
        )
    if name.startswith("SQLITE_READONLY") or err in (errno.EROFS, errno.EACCES, errno.EPERM) or "readonly" in text:
        return (
            f"The local database folder {folder}/ is read-only: make it writable (chmod u+w, or remount it "
            "read-write), or set CHAT_DATA_DIR to a writable folder."
        )
    if name in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or "malformed" in text or "not a database" in text:
        return (
            f"The local database {folder}/{FILE_NAME} is damaged. Restore your last backup with "
            f"`{RESTORE_HINT}` (make one with `python -m lib.admin backup --out FILE`), or move the "
            "folder away to start empty."
        )
    if name.startswith("SQLITE_BUSY") or "locked" in text:
        return (
            f"The local database in {folder}/ is in use by another process (another `streamlit run` or admin "
            "command). Stop it first, or set CHAT_DATA_DIR to another folder."
        )
    return (
        f"The local database in {folder}/ could not be read or written ({type(exc).__name__}: {exc}): check "
        "the disk and the folder's permissions, then try again."
    )


class Disk:
    """The SQLite file of one data folder, owned by this process until `close`."""

    def __init__(self, folder: Path, connection: sqlite3.Connection, lock_file: Any):
        self.folder = folder
        self.path = folder / FILE_NAME
        self._db = connection
        self._lock_file = lock_file
        self.failed: DiskError | None = None  # the last read that failed (moto may swallow the exception)
        self.rows_read = 0  # rows every read so far returned (tests and benches count what a request cost)
        self.unsynced = False  # commits since the last checkpoint (they would not survive an OS crash yet)

    # --- opening -------------------------------------------------------------

    @classmethod
    def open(cls, folder: str | os.PathLike) -> "Disk":
        """Lock the folder, open (or create) the database, check it. ConfigError/StoreUnavailable say what to do."""
        folder = Path(folder)
        if folder.exists() and not folder.is_dir():
            raise ConfigError(
                f"CHAT_DATA_DIR {folder} is a file, not a folder: set CHAT_DATA_DIR to a folder (it "
                "is created if missing), or move that file away."
            )
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreUnavailable(
                f"The local database folder {folder}/ cannot be created ({exc.strerror}): "
                "create it yourself, or set CHAT_DATA_DIR to a folder you can write."
            ) from exc
        lock_file = cls.lock_folder(folder)
        try:
            connection = cls._connect(folder)
        except BaseException:
            lock_file.close()
            raise
        return cls(folder, connection, lock_file)

    @staticmethod
    def lock_folder(folder: Path) -> Any:
        """The folder's lock file, flocked exclusively (close it to release); StoreUnavailable if another has it."""
        try:
            lock_file = (folder / LOCK_NAME).open("a+")
        except IsADirectoryError as exc:
            raise ConfigError(
                f"{folder / LOCK_NAME} is a folder; the local database needs that name for its lock file: move it away."
            ) from exc
        except OSError as exc:
            raise StoreUnavailable(explain(exc, folder)) from exc
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock_file.close()
            raise StoreUnavailable(
                f"The local database in {folder}/ is in use by another process (another `streamlit run` or admin "
                "command). Stop it first, or set CHAT_DATA_DIR to another folder."
            ) from None
        return lock_file

    @staticmethod
    def _connect(folder: Path) -> sqlite3.Connection:
        path = folder / FILE_NAME
        if path.exists() and not path.is_file():
            raise ConfigError(f"{path} is not a file: move it away (the local database needs that name).")
        try:
            # Every use is under the server's one request lock, from whichever request thread holds it.
            db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreUnavailable(explain(exc, folder)) from exc
        try:
            problems = [row[0] for row in db.execute("PRAGMA quick_check")]
            if problems != ["ok"]:
                raise StoreUnavailable(
                    f"The local database {path} is damaged ({problems[0]}). Restore your last backup with "
                    f"`{RESTORE_HINT}` (make one with `python -m lib.admin backup --out FILE`), or move the folder "
                    "away to start empty."
                )
            if db.execute("PRAGMA journal_mode=WAL").fetchone()[0].lower() != "wal":
                raise StoreUnavailable(
                    f"The local database {path} cannot use its write-ahead log: check that "
                    f"{folder}/ is writable and on a local disk."
                )
            db.execute(f"PRAGMA synchronous={SYNCHRONOUS}")
            db.executescript(_SCHEMA)
            db.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (FORMAT_VERSION,))
            version = db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()[0]
            if version != FORMAT_VERSION:
                raise StoreUnavailable(
                    f"The local database {path} has format {version}, this app reads format "
                    f"{FORMAT_VERSION}: run the app version that wrote it."
                )
        except sqlite3.Error as exc:
            db.close()
            raise StoreUnavailable(explain(exc, folder)) from exc
        except BaseException:
            db.close()
            raise
        return db

    # --- reads ---------------------------------------------------------------

    def _read(self, sql: str, params: tuple = ()) -> list[tuple]:
        try:
            rows = self._db.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            self.failed = DiskError(explain(exc, self.folder))
            raise self.failed from exc
        self.rows_read += len(rows)
        return rows

    def table_requests(self) -> list[tuple[str, str, dict]]:
        """(table, operation, request) in the order they were made."""
        return [
            (t, op, json.loads(r))
            for t, op, r in self._read("SELECT tbl, operation, request FROM table_requests ORDER BY seq")
        ]

    def partition(self, table: str, pk: str) -> list[str]:
        """The JSON images of one partition's items."""
        return [row[0] for row in self._read("SELECT item FROM items WHERE tbl = ? AND pk = ?", (table, pk))]

    def partition_rows(self, table: str, pk: str) -> list[tuple[str, str]]:
        """(sk, image) of every item of one partition."""
        return self._read("SELECT sk, item FROM items WHERE tbl = ? AND pk = ?", (table, pk))

    def partition_keys(self, table: str) -> list[str]:
        """The pk of every partition of a table that holds an item."""
        return [row[0] for row in self._read("SELECT DISTINCT pk FROM items WHERE tbl = ?", (table,))]

    def item(self, table: str, pk: str, sk: str) -> str | None:
        """One item's image, or None."""
        rows = self._read("SELECT item FROM items WHERE tbl = ? AND pk = ? AND sk = ?", (table, pk, sk))
        return rows[0][0] if rows else None

    def range_rows(
        self,
        table: str,
        pk: str,
        low: SortBound,
        high: SortBound,
        forward: bool,
        limit: int,
        *,
        keys_only: bool = False,
    ) -> list[tuple[str, str | None]]:
        """(sk, image) of one partition's items between two sort-key bounds ((sk, inclusive), None: open), at most
        `limit`, in sort-key order (descending unless `forward`); the image is None with `keys_only`. The primary
        key's b-tree is walked from one bound: what is read is the range, not the partition."""
        where, params = ["tbl = ?", "pk = ?"], [table, pk]
        if low is not None:
            where.append("sk >= ?" if low[1] else "sk > ?")
            params.append(low[0])
        if high is not None:
            where.append("sk <= ?" if high[1] else "sk < ?")
            params.append(high[0])
        columns = "sk, NULL" if keys_only else "sk, item"
        order = "ASC" if forward else "DESC"
        sql = f"SELECT {columns} FROM items WHERE {' AND '.join(where)} ORDER BY sk {order} LIMIT ?"
        return self._read(sql, (*params, limit))

    def rows_after(self, table: str, after: tuple[str, str] | None, limit: int) -> list[tuple[str, str, str]]:
        """(pk, sk, image) in key order (UTF-8 byte order = DynamoDB's string order), after `after`."""
        if after is None:
            return self._read("SELECT pk, sk, item FROM items WHERE tbl = ? ORDER BY pk, sk LIMIT ?", (table, limit))
        return self._read(
            "SELECT pk, sk, item FROM items WHERE tbl = ? AND (pk, sk) > (?, ?) ORDER BY pk, sk LIMIT ?",
            (table, *after, limit),
        )

    def expired(self, table: str, attribute: str, now: float, limit: int) -> list[dict]:
        """The stored images (wire format) of up to `limit` items whose TTL `attribute` (a number, epoch seconds)
        is at or before `now`: the embedded database's TTL sweep. A cheap text test skips items without it."""
        if attribute == "expire_at":  # the table's own TTL attribute: the items_by_expiry index's expression
            sql = (
                "SELECT item FROM items WHERE tbl = ? AND instr(item, '\"expire_at\"') > 0 "
                "AND CAST(json_extract(item, '$.\"expire_at\".N') AS REAL) <= ? LIMIT ?"
            )
            return [json.loads(image) for (image,) in self._read(sql, (table, now, limit))]
        path = '$."' + attribute.replace('"', "") + '".N'
        rows = self._read(  # another attribute name: every item of the table is read
            "SELECT item FROM items INDEXED BY items_by_table WHERE tbl = ? AND instr(item, ?) > 0 "
            "AND CAST(json_extract(item, ?) AS REAL) <= ? LIMIT ?",
            (table, f'"{attribute}"', path, now, limit),
        )
        return [json.loads(image) for (image,) in rows]

    def count(self, table: str) -> int:
        return self._read("SELECT count(*) FROM items INDEXED BY items_by_table WHERE tbl = ?", (table,))[0][0]

    def has_items(self) -> bool:
        return bool(self._read("SELECT 1 FROM items LIMIT 1"))

    def meta(self, key: str) -> str | None:
        rows = self._read("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    # --- writes --------------------------------------------------------------

    def check_owner(self) -> None:
        """DiskError unless our lock file is still linked in the folder (deleted or replaced: its link count is 0,
        and a second process could now take the folder). An fstat: no path lookup on the write path."""
        try:
            linked = os.fstat(self._lock_file.fileno()).st_nlink > 0
        except OSError:
            linked = False
        if not linked:
            raise DiskError(
                f"The lock file {self.folder}/{LOCK_NAME} was deleted while the app was running, so "
                f"another process may be using {self.folder}/: stop every app and admin command on that "
                "folder, then start the app again (this write was not saved)."
            )

    def transaction(self, statements: list[tuple[str, tuple | list[tuple]]]) -> None:
        """Run the statements in one SQLite transaction: all durable on return, or none (DiskError)."""
        self.check_owner()
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for sql, params in statements:
                    if isinstance(params, list):  # many rows of one statement
                        self._db.executemany(sql, params)
                    else:
                        self._db.execute(sql, params)
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise DiskError(explain(exc, self.folder)) from exc

    def checkpoint(self) -> None:
        """fsync the WAL and copy it into the database file (PASSIVE: never waits for a reader, e.g. a backup)."""
        try:
            self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as exc:
            raise DiskError(explain(exc, self.folder)) from exc
        self.unsynced = False

    def commit(self, writes: list[tuple[str, str, str, str | None]], extra: list[tuple[str, tuple]] = ()) -> None:
        """(table, pk, sk, JSON image or None to delete) of one request, in one transaction, with `extra`
        statements (the vector index entries of those images: lib/embedded/vectors.py)."""
        self.unsynced = True
        # A request names each key once (DynamoDB refuses duplicates), so puts and deletes can go in two batches.
        self.transaction(
            [
                ("INSERT OR REPLACE INTO items VALUES (?, ?, ?, ?)", [w for w in writes if w[3] is not None]),
                ("DELETE FROM items WHERE tbl = ? AND pk = ? AND sk = ?", [w[:3] for w in writes if w[3] is None]),
                *extra,
            ]
        )

    def record_table_request(self, table: str, operation: str, request: dict) -> None:
        statements = [
            (
                "INSERT INTO table_requests (tbl, operation, request) VALUES (?, ?, ?)",
                (table, operation, json.dumps(request, ensure_ascii=False)),
            )
        ]
        if operation == "CreateTable":  # a table made again after a delete starts empty
            statements[:0] = [
                ("DELETE FROM table_requests WHERE tbl = ?", (table,)),
                ("DELETE FROM items WHERE tbl = ?", (table,)),
            ]
        self.transaction(statements)

    def drop_table(self, table: str) -> None:
        self.transaction(
            [("DELETE FROM table_requests WHERE tbl = ?", (table,)), ("DELETE FROM items WHERE tbl = ?", (table,))]
        )

    def import_all(
        self, tables: dict[str, dict], items: Iterator[tuple[str, str, str, str]], meta: dict[str, str]
    ) -> None:
        """A migration: table definitions, items and meta markers in one transaction (all or nothing)."""
        statements: list[tuple[str, tuple]] = []
        for name, request in tables.items():
            statements.append(
                (
                    "INSERT INTO table_requests (tbl, operation, request) VALUES (?, 'CreateTable', ?)",
                    (name, json.dumps(request)),
                )
            )
        statements.append(("INSERT OR REPLACE INTO items VALUES (?, ?, ?, ?)", list(items)))
        statements.append(("INSERT OR REPLACE INTO meta VALUES (?, ?)", list(meta.items())))
        self.transaction(statements)

    def close(self) -> None:
        try:
            self._db.close()
        finally:
            self._lock_file.close()  # releases the lock
