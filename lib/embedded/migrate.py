"""One-time import of the old journal format (`snapshot.jsonl` + `journal.jsonl`) into the SQLite disk.

Strict: every line must be UTF-8 JSON of the old shape {"w": [[table, key, image|null], ...]},
or the import stops with the file and line number and nothing is imported. The one
line allowed to be unreadable is a journal's last line without its newline: the old
server died writing it, before that request got its response. The old files are
kept, renamed `*.imported`; a marker in the database makes an interrupted rename
finish on the next start instead of importing twice.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from lib.embedded.disk import Disk, DiskError, key_text
from lib.errors import StoreUnavailable

SNAPSHOT, JOURNAL = "snapshot.jsonl", "journal.jsonl"
MARKER = "imported_journal"


class _Recorder:
    """Stands in for a boto3 client: keeps the CreateTable request lib.storage.schema would send."""

    def __init__(self) -> None:
        self.request: dict = {}

    def create_table(self, **request: Any) -> None:
        self.request = request


def table_request(name: str) -> dict:
    """The chat table's CreateTable request (the old journal stored items only; every table was the chat schema)."""
    from lib.storage.schema import create_table

    recorder = _Recorder()
    create_table(recorder, name, wait=False)
    return recorder.request


def _bad(path: Path, number: int, why: str) -> StoreUnavailable:
    folder = path.parent
    return StoreUnavailable(
        f"Line {number} of {path} cannot be read ({why}), so the old journal was not imported (nothing was, and the "
        f"old files are unchanged): fix or delete that line and start again, or move {folder}/ away to start empty."
    )


def _entries(path: Path, journal: bool) -> list[tuple[int, list]]:
    """(line number, writes) of one old file, strictly; a torn last journal line is dropped."""
    data = path.read_bytes()
    lines = data.split(b"\n")
    last_complete = data.endswith(b"\n") or not data
    if last_complete:
        lines = lines[:-1]
    out = []
    for number, raw in enumerate(lines, start=1):
        torn = number == len(lines) and not last_complete
        try:
            entry = json.loads(raw.decode("utf-8"))
            writes = entry["w"]
            if not isinstance(writes, list):
                raise TypeError("'w' is not a list")
            for table, key, image in writes:
                if (
                    not isinstance(table, str)
                    or not isinstance(key, dict)
                    or not (image is None or isinstance(image, dict))
                ):
                    raise TypeError("not [table, key, image]")
        except (UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
            if torn and journal:
                continue  # died mid-append: that write was never acknowledged
            why = "it ends in the middle of a line" if torn else f"{type(exc).__name__}: {str(exc)[:80]}"
            raise _bad(path, number, why) from exc
        out.append((number, writes))
    return out


def import_journal(disk: Disk) -> str | None:
    """Import the folder's old journal once; returns what was done, or None when there is none."""
    folder = disk.folder
    snapshot, journal = folder / SNAPSHOT, folder / JOURNAL
    present = [p for p in (snapshot, journal) if p.is_file()]
    if not present:
        return None
    summary = disk.meta(MARKER)
    if summary is None:
        if disk.has_items() or disk.table_requests():
            raise StoreUnavailable(
                f"{folder}/ holds both a database and an old journal ({', '.join(p.name for p in present)}) not "
                "imported into it: move the journal files away to keep the database, or move the database "
                "(chat.sqlite3*) away to import the journal."
            )
        if journal.is_file() and journal.stat().st_size and not snapshot.is_file():
            raise StoreUnavailable(
                f"{snapshot} is missing, but {journal} is not empty: the snapshot holds everything older than the "
                "journal, so importing the journal alone would lose chats. Put the snapshot back, or move both away "
                "to start empty."
            )
        state: dict[tuple[str, str], tuple[dict, dict | None]] = {}
        for path in present:
            for _number, writes in _entries(path, journal=path == journal):
                for table, key, image in writes:
                    state[(table, json.dumps(key, sort_keys=True))] = (key, image)
        tables = {name: table_request(name) for name in sorted({table for table, _ in state})}
        rows = []
        for (table, _), (key, image) in state.items():
            if image is None:
                continue
            schema = {k["KeyType"]: k["AttributeName"] for k in tables[table]["KeySchema"]}
            try:
                ((hash_kind, hash_value),) = key[schema["HASH"]].items()
                ((range_kind, range_value),) = key[schema["RANGE"]].items()
                if image[schema["HASH"]] != key[schema["HASH"]] or image[schema["RANGE"]] != key[schema["RANGE"]]:
                    raise ValueError("the image's key differs from its key")
            except (KeyError, ValueError, AttributeError) as exc:
                raise StoreUnavailable(
                    f"The old journal in {folder}/ has an item of table '{table}' without a valid pk/sk key ({exc}), "
                    "so nothing was imported and the old files are unchanged: move them away to start empty."
                ) from exc
            rows.append(
                (
                    table,
                    key_text(hash_kind, hash_value),
                    key_text(range_kind, range_value),
                    json.dumps(image, ensure_ascii=False),
                )
            )
        summary = (
            f"{len(rows)} items in {len(tables)} tables from {' + '.join(p.name for p in present)}, "
            f"{dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')}"
        )
        try:
            disk.import_all(tables, iter(rows), {MARKER: summary})
        except DiskError as exc:
            raise StoreUnavailable(f"The old journal could not be imported: {exc}") from exc
    for path in present:  # kept, out of the way
        target = path.with_name(path.name + ".imported")
        n = 1
        while target.exists():
            n += 1
            target = path.with_name(f"{path.name}.imported.{n}")
        try:
            path.rename(target)
        except OSError as exc:
            raise StoreUnavailable(
                f"The old journal was imported into {disk.path}, but {path} could not be renamed "
                f"({exc.strerror}): rename it yourself, then start again."
            ) from exc
    return summary
