"""Retention and the pending sweep, for every registered user.

Retention removes whole sessions whose last message is older than the cutoff (row, meta, turns, turn versions,
running summary and vectors, together; lib/ops/deletion.py), a chat whose sidebar row was lost among them (found
by its vectors), so the per-session invariants hold, and the user's
memories last written before the cutoff (their text came from questions). A chat the user
sends to while retention runs is kept: its deletion commits only on a meta still older than the cutoff, and
once that commit is made a send to it fails instead of being acknowledged and then deleted. Per-item TTL
is not used for it: DynamoDB's TTL deletes items one by one, days late and in no order, so a session's
row could outlive its meta or its turns (or the reverse) for days.

The sweep marks turns left pending by a crashed process as failed, as the page would show them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from lib.ops.audit_report import unlisted_sessions
from lib.ops.deletion import Deleted, delete_sessions
from lib.ops.users import registered_users
from lib.storage import keys
from lib.storage.operator import Operator


def _utcnow() -> dt.datetime:
    return keys.parse_time(keys.now())


def retention(
    db: Operator, older_than_days: float, *, dry_run: bool, now: dt.datetime | None = None, archives: Any = None
) -> dict[str, Deleted]:
    """Delete every session last active before now - older_than_days, for every user; per-user results (users
    with nothing deleted or kept are left out). `archives` (lib.storage.archive.ArchiveStore): a deleted chat's
    objects go too (its archive, long bodies and attached files), after its items (one left by a crash is an orphan
    `repair` removes)."""
    if older_than_days <= 0:
        raise ValueError("--older-than must be a positive number of days")
    cutoff = keys.format_time((now or _utcnow()) - dt.timedelta(days=older_than_days))
    results: dict[str, Deleted] = {}
    for user_id in registered_users(db):
        old = db.sessions_last_active_before(user_id, cutoff) + _unlisted_before(db, user_id, cutoff)
        deleted = delete_sessions(db, user_id, old, dry_run=dry_run, cutoff=cutoff, command="retention")
        if archives is not None and not dry_run and deleted.session_ids:
            deleted.kinds.update(archives.delete_objects(user_id, deleted.session_ids))
        # Memories are text taken from the user's questions: one last written before the cutoff goes too (one
        # Query of MEM#). Preferences (the memory switch, custom instructions) are settings the user keeps current
        # on the Memory page, not chat history: they stay.
        stale = [m for m in db.memory_records(user_id) if _memory_time(m) < cutoff]
        if stale:
            deleted.items += len(stale) if dry_run else db.delete_items(stale)
            deleted.kinds[keys.MEMORY] += len(stale)
        if deleted.sessions or deleted.kept or stale:
            results[user_id] = deleted
    return results


def _unlisted_before(db: Operator, user_id: str, cutoff: str) -> list[str]:
    """The user's chats no row lists (a lost sidebar row) whose meta was last active before the cutoff: named by
    their vector items (lib.ops.audit_report.unlisted_sessions: 1 Query of VEC#) and not by a row (2 Queries of
    SES#, TMP#), then their metas (1 BatchGetItem per 100, only when there are any). A chat with neither a row
    nor a vector is found only by a Scan (`purge-user --deep`, `check --deep`); one with no meta has no time to
    judge by and is left to `check` and `purge-user` (docs/audit.md)."""
    listed = {r["session_id"] for r in db.chat_rows(user_id) if "session_id" in r}
    unlisted = [s for s in unlisted_sessions(db, user_id, deep=False) if s not in listed]
    if not unlisted:
        return []
    by_pk = {keys.session_pk(user_id, s): s for s in unlisted}
    return [
        by_pk[meta["pk"]]
        for meta in db.metas(user_id, unlisted)
        if meta["pk"] in by_pk and str(meta.get("last_message_time", cutoff)) < cutoff
    ]


def _memory_time(memory: dict) -> str:
    """When a memory was last written (an edit counts: the user kept it then); '' if it holds no time."""
    times = [t for t in (memory.get("update_time"), memory.get("create_time")) if isinstance(t, str)]
    return max(times, default="")


@dataclass
class Swept:
    found: list[tuple[str, str, str]] = field(default_factory=list)  # (user, session, message)
    marked: int = 0
    changed_meanwhile: int = 0


def sweep_pending(
    db: Operator, older_than_s: float, *, dry_run: bool, within_days: float = 30, now: dt.datetime | None = None
) -> Swept:
    """Mark as failed every turn still pending older_than_s after it started, in sessions active within_days."""
    now = now or _utcnow()
    cutoff = keys.format_time(now - dt.timedelta(seconds=older_than_s))
    recent = keys.format_time(now - dt.timedelta(days=within_days))
    swept = Swept()
    for user_id in registered_users(db):
        for session_id in db.sessions_active_since(user_id, recent):
            for turn in db.pending_turns(user_id, session_id):
                if max(turn.create_time, turn.attempt_time or "") >= cutoff:
                    continue  # still within its time: its process may be answering it right now
                swept.found.append((user_id, session_id, turn.message_id))
                if dry_run:
                    continue
                # the write re-checks that it is still pending and was not restarted (a Retry) since we looked
                if db.fail_interrupted(user_id, turn, started_before=cutoff):
                    swept.marked += 1
                else:
                    swept.changed_meanwhile += 1
    return swept
