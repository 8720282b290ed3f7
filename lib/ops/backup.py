"""Moving data in and out: `backup`/`restore` of the local database, `export-table`/`import-table` as JSON lines.

backup: SQLite's online backup API, a consistent copy while the app runs (the app
holds the folder's lock; a reader does not need it, and WAL readers never block
the writer). restore: takes the folder (refused while the app runs), refuses to
replace a database without --force, and then keeps the replaced files beside it.
export/import: DynamoDB JSON lines as AWS's export to S3 writes them
({"Item": {...}} per line), through the DynamoDB API, so the same files move a
table between the local backend and AWS in both directions.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from lib.config import Settings
from lib.embedded.disk import FILE_NAME, FORMAT_VERSION, Disk
from lib.errors import ConfigError, StoreUnavailable
from lib.ops import audited
from lib.storage import keys
from lib.storage.operator import Operator

MEMORY = ":memory:"


class CommandError(Exception):
    """An admin command refused; the message says why and what to do (the CLI prints it, exit status 2)."""


def _local_folder(settings: Settings) -> Path:
    if settings.backend != "local":
        raise CommandError(
            "backup and restore are for the local backend; on AWS use point-in-time recovery "
            "(on by `python -m lib.admin create-table`) or export-table."
        )
    if settings.data_dir == MEMORY:
        raise CommandError("CHAT_DATA_DIR is :memory:, so there is no local database on disk to back up or restore.")
    return Path(settings.data_dir)


def _summary(db: sqlite3.Connection) -> str:
    items = db.execute("SELECT count(*) FROM items").fetchone()[0]
    tables = db.execute("SELECT count(DISTINCT tbl) FROM table_requests").fetchone()[0]
    return f"{items:,} items in {tables} table{'s' if tables != 1 else ''}"


def _check_backup(path: Path) -> str:
    """The backup's summary; CommandError unless it is an intact database of this format."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            if [row[0] for row in db.execute("PRAGMA quick_check")] != ["ok"]:
                raise CommandError(f"{path} is damaged (PRAGMA quick_check failed): use another backup.")
            version = db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
            if version is None or version[0] != FORMAT_VERSION:
                raise CommandError(f"{path} is a database of another format ({version}), not a backup of this app.")
            return _summary(db)
        finally:
            db.close()
    except sqlite3.Error as exc:
        raise CommandError(f"{path} is not a backup of the local database ({exc}).") from exc


def backup(settings: Settings, out: str | os.PathLike) -> str:
    """Copy the local database to `out` (a new file), consistently, even while the app runs."""
    folder = _local_folder(settings)
    source, out = folder / FILE_NAME, Path(out)
    if not source.is_file():
        raise CommandError(f"There is no local database in {folder}/ ({FILE_NAME}) to back up.")
    if out.exists():
        raise CommandError(f"{out} already exists: choose a new file name (a backup never overwrites one).")
    partial = out.with_name(out.name + ".partial")
    try:
        src = sqlite3.connect(source)  # an ordinary reader: the running app's lock is not needed to read
        try:
            dst = sqlite3.connect(partial)
            try:
                src.backup(dst)  # one read transaction: a consistent copy
                dst.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
            finally:
                dst.close()
        finally:
            src.close()
        summary = _check_backup(partial)
        os.replace(partial, out)
    except (sqlite3.Error, OSError) as exc:
        partial.unlink(missing_ok=True)
        raise CommandError(f"The backup to {out} failed ({exc}); nothing was changed.") from exc
    return f"Backed up {summary} from {source} to {out} ({out.stat().st_size:,} bytes)."


def restore(settings: Settings, backup_file: str | os.PathLike, force: bool = False) -> str:
    """Make `backup_file` the local database; the app must be stopped; an existing database needs --force."""
    folder = _local_folder(settings)
    backup_file = Path(backup_file)
    if not backup_file.is_file():
        raise CommandError(f"{backup_file} is not a file.")
    summary = _check_backup(backup_file)
    folder.mkdir(parents=True, exist_ok=True)
    lock = Disk.lock_folder(folder)  # refuses while the app (or another command) has the folder
    try:
        target = folder / FILE_NAME
        kept = ""
        if target.exists():
            if not force:
                raise CommandError(
                    f"{folder}/ already holds a database; restoring replaces it. Add --force to "
                    "restore anyway (the current files are kept beside it, renamed)."
                )
            stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
            for suffix in ("", "-wal", "-shm"):
                old = folder / (FILE_NAME + suffix)
                if old.exists():
                    old.rename(folder / f"{FILE_NAME}{suffix}.replaced-{stamp}")
            kept = f"; the replaced database is kept as {FILE_NAME}.replaced-{stamp}"
        src = sqlite3.connect(f"file:{backup_file}?mode=ro", uri=True)
        try:
            dst = sqlite3.connect(target)
            try:
                src.backup(dst)
            finally:
                dst.close()
        finally:
            src.close()
    except (sqlite3.Error, OSError) as exc:
        raise CommandError(f"The restore into {folder}/ failed ({exc}).") from exc
    finally:
        lock.close()
    return f"Restored {summary} from {backup_file} into {folder}/{kept}."


# --- export / import: DynamoDB JSON lines ------------------------------------------------------------------------


def export_table(settings: Settings, out: str | os.PathLike) -> str:
    """Write every item of the configured table to `out`, one {"Item": ...} per line (consistent Scan pages)."""
    from lib.database import open_database

    out = Path(out)
    if out.exists():
        raise CommandError(f"{out} already exists: choose a new file name (an export never overwrites one).")
    database = open_database(settings)
    db = Operator.of(database)
    partial = out.with_name(out.name + ".partial")
    count = 0
    with partial.open("w", encoding="utf-8") as lines:
        for item in db.scan_table():
            lines.write(json.dumps({"Item": item}, ensure_ascii=False) + "\n")
            count += 1
        lines.flush()
        os.fsync(lines.fileno())
    os.replace(partial, out)
    return f"Exported {count:,} items of {database.where} (table '{database.table}') to {out}."


def _typed(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and len(value) == 1
        and next(iter(value)) in ("S", "N", "B", "BOOL", "NULL", "SS", "NS", "BS", "L", "M")
    )


def read_export(path: str | os.PathLike) -> list[dict]:
    """The items of an export file, strictly: CommandError naming the first bad line, before anything is written."""
    path = Path(path)
    items = []
    try:
        raw_lines = path.read_bytes().split(b"\n")
    except OSError as exc:
        raise CommandError(f"{path} cannot be read ({exc.strerror}).") from exc
    for number, raw in enumerate(raw_lines, start=1):
        if not raw.strip():
            continue
        try:
            item = json.loads(raw.decode("utf-8"))["Item"]
            if not isinstance(item, dict) or not all(_typed(v) for v in item.values()):
                raise TypeError("not DynamoDB JSON")
            if not isinstance(item.get("pk", {}).get("S"), str) or not isinstance(item.get("sk", {}).get("S"), str):
                raise KeyError("pk and sk strings")
        except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CommandError(
                f"Line {number} of {path} is not an exported item ({type(exc).__name__}: "
                f"{str(exc)[:80]}); nothing was imported."
            ) from exc
        items.append(item)
    return items


def import_table(settings: Settings, path: str | os.PathLike, merge: bool = False) -> str:
    """Put every item of an export file into the configured table; an empty table unless --merge."""
    from lib.database import open_database

    items = read_export(path)
    database = open_database(settings)
    db = Operator.of(database)
    if not merge and db.has_items():
        raise CommandError(
            f"Table '{database.table}' ({database.where}) already holds items; an import replaces "
            "items with the same keys. Add --merge to import into it anyway."
        )
    # Audit records are never overwritten: a forged line must not rewrite the trail (docs/audit.md)
    trail = [i for i in items if i["pk"]["S"].startswith(keys.AUDIT_PREFIX)]
    written = db.put_items([i for i in items if not i["pk"]["S"].startswith(keys.AUDIT_PREFIX)])
    new, skipped = db.put_new_items(trail)
    audited.note(audit_records_skipped=skipped)
    kept = (
        f" {skipped:,} audit record{' already in the table was' if skipped == 1 else 's already in the table were'} "
        "skipped: an import never replaces an audit record."
        if skipped
        else ""
    )
    return f"Imported {written + new:,} items from {path} into {database.where} (table '{database.table}').{kept}"


def run(command: str, settings: Settings, args: Any) -> int:
    """The CLI's entry for these commands: prints the outcome; 2 with the reason when refused."""
    import sys

    try:
        if command == "backup":
            print(backup(settings, args.out))
        elif command == "restore":
            print(restore(settings, args.file, force=args.force))
        elif command == "export-table":
            print(export_table(settings, args.out))
        else:
            print(import_table(settings, args.file, merge=args.merge))
    except (CommandError, ConfigError, StoreUnavailable) as exc:
        print(str(exc), file=sys.stderr)
        return 2
    return 0
