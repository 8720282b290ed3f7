"""Deleting whole sessions for an operator (purge-user, retention), in an order a crash cannot break.

Order, per batch of sessions:
  1. purge markers (PURGE#n in the user's partition) list the sessions being deleted;
  2. their sidebar rows go: from here on the user never sees a row whose chat is half gone;
  3. each session partition goes, its meta last, then the session's vector items;
  4. the markers go.
A crash anywhere leaves markers behind, and every command that deletes starts by finishing what the
markers list, so rerunning it resumes. Turns are never left without their meta and still visible.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from lib.ops.progress import Progress
from lib.storage import keys
from lib.storage.operator import Operator

MARKER_SESSIONS = 10_000  # session ids per marker item: 10,000 x 27 bytes stays far under 400 KB


@dataclass
class Deleted:
    sessions: int = 0
    items: int = 0
    session_ids: list[str] = field(default_factory=list)

    def add(self, other: Deleted) -> None:
        self.sessions += other.sessions
        self.items += other.items
        self.session_ids += other.session_ids


def user_partition(db: Operator, user_id: str, prefix: str = "") -> list[dict]:
    """Items of the user's own partition (plain values, keys and small attributes), optionally by sk prefix."""
    return db.user_partition(user_id, prefix)


def interrupted(db: Operator, user_id: str) -> list[str]:
    """Sessions an earlier deletion listed in its markers and did not finish."""
    ids: list[str] = []
    for marker in db.user_partition(user_id, keys.PURGE_PREFIX):
        ids += sorted(marker.get("session_ids", ()))
    return ids


def delete_sessions(
    db: Operator, user_id: str, session_ids: Iterable[str], *, dry_run: bool, show_progress: bool = False
) -> Deleted:
    """Delete these sessions of the user (rows, partitions, vectors), finishing any interrupted deletion first."""
    pending = list(dict.fromkeys([*interrupted(db, user_id), *session_ids]))
    done = Deleted()
    if not pending:
        return done
    rows = [r for r in db.user_partition(user_id, keys.SESSION_PREFIX) if r.get("session_id") in set(pending)]
    if dry_run:
        done.sessions, done.session_ids = len(pending), pending
        done.items = len(rows) + sum(len(_partition_keys(db, user_id, s)) for s in pending)
        return done
    db.mark_purging(user_id, pending, MARKER_SESSIONS)
    done.items += db.delete_items(rows)
    for session_id in Progress(pending, f"deleting {user_id}'s chats", force=show_progress):
        partition = _partition_keys(db, user_id, session_id)
        # the meta last: until it goes, `check` still sees whatever is left as this session's
        partition.sort(key=lambda k: keys.record_kind(k["sk"]) == keys.META)
        done.items += db.delete_items(partition)
        done.items += db.delete_items(db.user_partition(user_id, keys.session_vector_prefix(session_id)))
        done.sessions += 1
        done.session_ids.append(session_id)
    db.delete_items(db.user_partition(user_id, keys.PURGE_PREFIX))
    return done


def _partition_keys(db: Operator, user_id: str, session_id: str) -> list[dict]:
    return db.session_keys(user_id, session_id)
