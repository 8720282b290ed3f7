"""Per-user operations: list users, purge a user's data, export it (a data-subject request).

Users come from the registry (pk USERS, one item per user who ever started a chat, written in the
same transaction as their first chat), so listing them is one paged Query, never a Scan. Tables older
than the registry get it with `users --rebuild` (one Scan, once).
"""

from __future__ import annotations

import datetime as dt
import json
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from lib.errors import NoSuchUser
from lib.export import to_json, to_markdown
from lib.ops.deletion import delete_sessions
from lib.storage import keys
from lib.storage.operator import Operator
from lib.storage.store import ChatStore

USAGE_LOOKBACK_DAYS = 800  # how far back purge-user --usage looks for the user's usage buckets


@dataclass(frozen=True)
class UserSummary:
    user_id: str
    sessions: int
    turns: int
    last_activity: str | None
    first_time: str | None


def registered_users(db: Operator) -> Iterator[str]:
    """Every user in the registry, in user-id order (one Query per 1 MB page)."""
    return db.registered_users()


def summarize(db: Operator, user_id: str) -> UserSummary:
    """Sessions and last activity from the sidebar rows; turns from the metas (BatchGetItem, 100 a request)."""
    rows = db.user_partition(user_id, keys.SESSION_PREFIX)
    times = [keys.list_row_parts(r["sk"])[0] for r in rows]
    metas = db.metas(user_id, [r["session_id"] for r in rows])
    registry = db.registry_entry(user_id)
    return UserSummary(
        user_id,
        len(rows),
        sum(int(m["message_count"]) for m in metas),
        max(times) if times else None,
        registry.get("first_time") if registry else None,
    )


def rebuild_registry(db: Operator) -> int:
    """Register every user who has a sidebar row (one Scan); returns how many were registered."""
    users = db.first_activity()
    for user_id, first in users.items():
        db.register(user_id, first)
    return len(users)


def purge_user(
    db: Operator, user_id: str, *, dry_run: bool, usage: bool = False, today: dt.date | None = None
) -> dict[str, int]:
    """Delete every item of the user: sessions (rows first), then the rest of their partition (memories,
    vectors), the registry entry and, with `usage`, their usage buckets. Resumable; returns counts.

    NoSuchUser, before anything is deleted, for an id with none of these (a typo must not read as success)."""
    rows = db.user_partition(user_id, keys.SESSION_PREFIX)
    buckets: list[dict] = []
    if usage:
        today = today or dt.datetime.now(dt.UTC).date()
        days = [(today - dt.timedelta(days=n)).isoformat() for n in range(USAGE_LOOKBACK_DAYS)]
        buckets = db.usage_bucket_keys(user_id, days)
    if not rows and not buckets and db.registry_entry(user_id) is None and not db.user_partition(user_id):
        what = "registry entry, chat, memory or usage bucket" if usage else "registry entry, chat or memory"
        raise NoSuchUser(f"no such user {user_id!r}: the table holds no {what} of that id; nothing was deleted.")
    deleted = delete_sessions(db, user_id, [r["session_id"] for r in rows], dry_run=dry_run, show_progress=True)
    # after a real deletion only memories, vectors and the like are left; a dry run still sees the rows
    rest = [i for i in db.user_partition(user_id) if not (dry_run and keys.record_kind(i["sk"]) == keys.LIST_ROW)]
    counts = {
        "sessions": deleted.sessions,
        "session_items": deleted.items,
        "other_items": len(rest),
        "usage_buckets": len(buckets),
    }
    if not dry_run:
        db.delete_items([*rest, *buckets, keys.registry_key(user_id)])
    return counts


def export_user(store: ChatStore, db: Operator, user_id: str, out: Path) -> dict[str, int]:
    """Every chat of the user as Markdown and JSON, and their memories, in a zip written one chat at a time."""
    sessions = turns = 0
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for row in db.user_partition(user_id, keys.SESSION_PREFIX):
            session = store.get_session(user_id, row["session_id"])
            messages = store.all_messages(user_id, session.session_id)
            name = f"chats/{session.create_time[:10]}-{session.session_id}"
            archive.writestr(f"{name}.md", to_markdown(session, messages))
            archive.writestr(f"{name}.json", to_json(session, messages))
            sessions, turns = sessions + 1, turns + len(messages)
        memories = db.memory_records(user_id)
        archive.writestr(
            "memories.json",
            json.dumps(
                [{k: v for k, v in m.items() if k not in ("pk", "sk", "embedding")} for m in memories],
                ensure_ascii=False,
                indent=2,
                default=str,
            ),
        )
        preferences = db.preference_records(user_id)  # the memory switch and the custom instructions
        archive.writestr(
            "preferences.json",
            json.dumps(
                [{k: v for k, v in p.items() if k not in ("pk",)} for p in preferences],
                ensure_ascii=False,
                indent=2,
                default=str,
            ),
        )
        archive.writestr(
            "README.txt",
            f"All chats of {user_id}, exported {keys.now()}: {sessions} chats, {turns} "
            "turns, as Markdown (to read) and JSON (every field), plus memories.json and preferences.json (the "
            "memory switch and the custom instructions).\n",
        )
    return {"sessions": sessions, "turns": turns, "memories": len(memories)}
