"""Per-user operations: list users, purge a user's data, export it (a data-subject request).

Users come from the registry (pk USERS, one item per user who ever started a chat, written in the
same transaction as their first chat), so listing them is one paged Query, never a Scan. Tables older
than the registry get it with `users --rebuild` (one Scan, once).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lib.errors import NoSuchUser, SessionNotFound
from lib.export import to_json, to_markdown
from lib.ops.audit_report import counted_already, purge_kinds, scanned_partitions, unlisted_sessions
from lib.ops.deletion import delete_sessions
from lib.storage import keys
from lib.storage.archive import ArchivedChat
from lib.storage.operator import Operator
from lib.storage.store import ChatStore
from lib.storage.summaries import SummaryStore

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
    rows = [r for r in rows if keys.is_list_sk(r["sk"])]
    times = [keys.row_time(r) for r in rows]
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


def nothing_deleted() -> dict[str, Any]:
    """purge_user's counts when the table held nothing of the user (a purge resumed at its object step)."""
    return {
        "sessions": 0,
        "session_items": 0,
        "other_items": 0,
        "usage_buckets": 0,
        "share_items": 0,
        "registry": 0,
        "kinds": {},
    }


def purge_user(
    db: Operator,
    user_id: str,
    *,
    dry_run: bool,
    usage: bool = False,
    today: dt.date | None = None,
    deep: bool = False,
) -> dict[str, Any]:
    """Delete every item of the user: sessions (rows first), then the rest of their partition (memories,
    vectors), the registry entry and, with `usage`, their usage buckets. Resumable; returns counts, and `kinds`:
    the items by record kind (the purge report). Chats no sidebar row lists are found by their vector items and,
    with `deep`, by a Scan of the table (lib.ops.audit_report.scanned_partitions), which also finds a project
    partition (its meta: name and instructions) whose PRJ# row was lost.

    NoSuchUser, before anything is deleted, for an id with none of these (a typo must not read as success)."""
    rows = db.chat_rows(user_id)  # temporary chats too: purge leaves nothing for TTL to find later
    buckets: list[dict] = []
    if usage:
        today = today or dt.datetime.now(dt.UTC).date()
        days = [(today - dt.timedelta(days=n)).isoformat() for n in range(USAGE_LOOKBACK_DAYS)]
        buckets = db.usage_bucket_keys(user_id, days)
    listed = {r["session_id"] for r in rows if "session_id" in r}
    scanned, scanned_projects = scanned_partitions(db, user_id) if deep else ([], [])  # 1 Scan, only when asked
    unlisted = [s for s in dict.fromkeys([*unlisted_sessions(db, user_id, deep=False), *scanned]) if s not in listed]
    registry = db.registry_entry(user_id)
    nothing = not rows and not buckets and not unlisted and not scanned_projects and registry is None
    if nothing and not db.user_partition(user_id):
        what = "registry entry, chat, memory or usage bucket" if usage else "registry entry, chat or memory"
        raise NoSuchUser(f"no such user {user_id!r}: the table holds no {what} of that id; nothing was deleted.")
    deleted = delete_sessions(db, user_id, [*listed, *unlisted], dry_run=dry_run, show_progress=True)
    # Share links whose chat is gone already (their shares first: a link record is how a share is found again)
    shared = (
        sum(1 + link.parts for link in db.shares.link_records(user_id)) if dry_run else db.shares.delete_links(user_id)
    )
    # after a real deletion only memories, vectors and the like are left; a dry run still sees the rows
    rest = [i for i in db.user_partition(user_id) if not (dry_run and counted_already(i, deleted.session_ids))]
    # Each project's partition (its meta with the instructions, any chat row left): found by the project rows
    # and, with `deep`, by the Scan (a partition whose row was lost)
    project_ids = dict.fromkeys([*_project_ids(rest), *scanned_projects])
    projects = [i for p in project_ids for i in db.project_records(user_id, p)]
    rest = [*projects, *rest]  # partitions before the rows that find them: a crash in between is resumed
    counts = {
        "sessions": deleted.sessions,
        "session_items": deleted.items,
        "other_items": len(rest),
        "usage_buckets": len(buckets),
        "share_items": shared,
        "registry": int(registry is not None),
        "kinds": purge_kinds(deleted.kinds, rest, registry is not None, len(buckets)),
    }
    if not dry_run:
        # the user's own spend limit goes too (an admin's setting for a leaver: no chat text, but their id)
        db.delete_items([*rest, *buckets, keys.registry_key(user_id), keys.limit_key("user", user_id)])
    return counts


def _project_ids(items: list[dict]) -> list[str]:
    """The project ids the user's project rows name (lib/storage/projects.py)."""
    return [keys.project_row_parts(i["sk"])[1] for i in items if keys.record_kind(i["sk"]) == keys.PROJECT_ROW]


def export_user(
    store: ChatStore, db: Operator, user_id: str, out: Path, *, summaries: SummaryStore | None = None
) -> dict[str, int]:
    """Every chat of the user as Markdown and JSON, with what was derived from it (a turn's other versions, the
    running summary: `<chat>.derived.json`), and their memories, in a zip written one chat at a time. Chats no
    sidebar row lists but whose meta exists (found by their vector items) are exported too."""
    sessions = turns = files = 0
    listed = [r["session_id"] for r in db.chat_rows(user_id) if "session_id" in r]
    unlisted = [s for s in unlisted_sessions(db, user_id, deep=False) if s not in set(listed)]
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for session_id in [*listed, *unlisted]:
            try:
                session = store.get_session(user_id, session_id)
            except SessionNotFound:
                continue  # a vector whose chat is gone (search drops it too)
            cold = None
            if session.archive is not None:  # in the cold tier: read from its object, left archived (docs/archive.md)
                cold = store.archive.contents(user_id, session, store.bodies)
                messages = cold.messages
            else:
                messages = store.all_messages(user_id, session.session_id)
            name = f"chats/{session.create_time[:10]}-{session.session_id}"
            archive.writestr(f"{name}.md", to_markdown(session, messages))
            archive.writestr(f"{name}.json", to_json(session, messages))
            for m in messages:  # the files attached to its questions, as uploaded (1 GetObject each)
                for a in m.attachments:
                    data = store.attachments.read(user_id, session.session_id, a, action="export")
                    archive.writestr(f"{name}.files/{m.message_id}/{a.attachment_id}-{a.name}", data)
                    files += 1
            derived = _derived(store, summaries, user_id, session.session_id, messages, cold=cold)
            if derived:
                archive.writestr(f"{name}.derived.json", json.dumps(derived, ensure_ascii=False, indent=2, default=str))
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
        projects = [  # each project's name, instructions and times (its chats say which project they are in)
            {k: v for k, v in item.items() if k not in ("pk", "sk", "user_id")}
            for project_id in _project_ids(db.user_partition(user_id, keys.PROJECT_PREFIX))
            for item in db.project_exports(user_id, project_id)
            if keys.record_kind(item["sk"]) == keys.PROJECT_META
        ]
        archive.writestr("projects.json", json.dumps(projects, ensure_ascii=False, indent=2, default=str))
        links = db.shares.export(user_id)  # the share links and what each live one shares (never a token)
        archive.writestr("shares.json", json.dumps(links, ensure_ascii=False, indent=2, default=str))
        archive.writestr(
            "README.txt",
            f"All chats of {user_id}, exported {keys.now()}: {sessions} chats, {turns} "
            "turns, as Markdown (to read) and JSON (every field), plus memories.json and preferences.json (the "
            "memory switch and the custom instructions), projects.json (your projects' names and instructions), and shares.json (your share links and what each live one "
            "shows).\n",
        )
    return {"sessions": sessions, "turns": turns, "memories": len(memories), "files": files}


def _derived(
    store: ChatStore,
    summaries: SummaryStore | None,
    user_id: str,
    session_id: str,
    messages: list,
    *,
    cold: ArchivedChat | None = None,
) -> dict[str, object]:
    """What was made from a chat besides its turns: every kept version of a regenerated or edited turn (1 Query
    each) and the running summary (1 GetItem); of an archived chat (`cold`), both from its object, read already
    (they are no longer in the table). Vectors are numbers computed from the turns: not exported."""
    versions = []
    for message in messages:
        if cold is not None:
            kept = cold.versions.get(message.message_id, [])
        else:
            kept = store.versions.versions(user_id, message) if message.versions > 1 else []
        for version in kept:
            data = dataclasses.asdict(version)
            data.pop("size", None)
            data["kept"] = sorted(version.kept)
            versions.append(data)
    if cold is not None:
        summary = cold.summary
    else:
        summary = summaries.get(user_id, session_id, action="export") if summaries is not None else None
    out: dict[str, object] = {}
    if versions:
        out["turn_versions"] = versions
    if summary is not None:
        out["running_summary"] = dataclasses.asdict(summary)
    return out
