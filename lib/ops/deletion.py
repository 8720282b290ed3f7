"""Deleting whole sessions for an operator (purge-user, retention), in an order neither a crash nor a user
sending at the same moment can break.

Order, per batch of sessions:
  1. purge markers (PURGE#n in the user's partition) list the sessions being deleted, with the deletion's
     cutoff (retention) and the command that wrote them;
  2. each session's meta and sidebar rows go in one transaction, conditional on the meta being as just read
     and, for retention, still last active before the cutoff (Operator.commit_deletion). A chat the user sent to
     after it was listed is kept whole; once its meta is gone, a send fails instead of committing a turn that
     step 3 would delete. From here on the user never sees a row whose chat is half gone;
  3. each committed session's partition goes (turns, summary), then its vector items;
  4. the markers go.
A crash anywhere leaves markers behind. Every deleting command starts by finishing what earlier markers list,
each under its own cutoff, so rerunning any of them resumes; until then `check` lists those sessions as an
unfinished deletion and `repair` leaves them alone (it would otherwise rebuild their orphaned turns).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from lib.ops.progress import Progress
from lib.storage import keys
from lib.storage.operator import DELETED, GONE, Operator

MARKER_SESSIONS = 10_000  # session ids per marker item: 10,000 x 27 bytes stays far under 400 KB


@dataclass
class Deleted:
    sessions: int = 0
    items: int = 0
    session_ids: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # listed, then used again before the deletion reached them
    kinds: Counter = field(default_factory=Counter)  # items by keys.record_kind (the purge report)

    def add(self, other: Deleted) -> None:
        self.sessions += other.sessions
        self.items += other.items
        self.kinds.update(other.kinds)
        self.session_ids += other.session_ids
        self.kept += other.kept


def user_partition(db: Operator, user_id: str, prefix: str = "") -> list[dict]:
    """Items of the user's own partition (plain values, keys and small attributes), optionally by sk prefix."""
    return db.user_partition(user_id, prefix)


def interrupted(db: Operator, user_id: str) -> list[str]:
    """Sessions an earlier deletion listed in its markers and did not finish."""
    ids: list[str] = []
    for marker in db.purge_markers(user_id):
        ids += sorted(marker.get("session_ids", ()))
    return ids


def delete_sessions(
    db: Operator,
    user_id: str,
    session_ids: Iterable[str],
    *,
    dry_run: bool,
    cutoff: str | None = None,
    command: str = "purge-user",
    show_progress: bool = False,
) -> Deleted:
    """Delete these sessions of the user (rows, partitions, vectors), finishing any interrupted deletion first.

    With `cutoff` (a key time), only sessions whose meta is still last active before it go; the others are
    `kept`. A dry run lists and counts what would go, writing nothing."""
    markers = db.purge_markers(user_id)
    wanted = list(dict.fromkeys(session_ids))
    if dry_run:
        pending = list(dict.fromkeys([*(s for m in markers for s in sorted(m.get("session_ids", ()))), *wanted]))
        rows = _rows(db, user_id)
        done = Deleted(len(pending), session_ids=pending)
        done.items = sum(len(rows.get(s, ())) + len(_partition_keys(db, user_id, s)) for s in pending)
        done.items += sum(len(db.user_partition(user_id, keys.session_vector_prefix(s))) for s in pending)
        done.kinds = _kinds_of(db, user_id, pending, rows, markers)
        return done
    done = Deleted()
    for marker in markers:  # an earlier run's work first, under the condition it was started with
        done.add(_delete(db, user_id, sorted(marker.get("session_ids", ())), marker.get("cutoff_time"), show_progress))
        db.delete_items([marker])
        done.kinds[keys.PURGE] += 1
    finished = {*done.session_ids, *done.kept}
    new = [s for s in wanted if s not in finished]
    if new:
        written = db.mark_purging(user_id, new, MARKER_SESSIONS, cutoff=cutoff, command=command)
        done.add(_delete(db, user_id, new, cutoff, show_progress))
        db.delete_items(written)
    return done


def _delete(db: Operator, user_id: str, session_ids: list[str], cutoff: str | None, show_progress: bool) -> Deleted:
    """Steps 2 and 3 for sessions a marker lists: every session hidden (or kept) first, then the partitions."""
    done, rows, committed = Deleted(), _rows(db, user_id), []
    for session_id in session_ids:
        outcome = db.commit_deletion(user_id, session_id, rows.get(session_id, []), cutoff=cutoff)
        if outcome in (DELETED, GONE):
            committed.append(session_id)
            done.items += len(rows.get(session_id, ())) + (outcome == DELETED)
            done.kinds[keys.LIST_ROW] += len(rows.get(session_id, ()))
            done.kinds[keys.META] += outcome == DELETED
        else:
            done.kept.append(session_id)
    for session_id in Progress(committed, f"deleting {user_id}'s chats", force=show_progress):
        partition = _partition_keys(db, user_id, session_id)
        vectors = db.user_partition(user_id, keys.session_vector_prefix(session_id))
        done.kinds.update(keys.record_kind(i["sk"]) for i in [*partition, *vectors])
        done.items += db.delete_items(partition)  # the meta is gone already
        done.items += db.delete_items(vectors)
        done.sessions += 1
        done.session_ids.append(session_id)
    if committed:  # a share link's snapshot is a copy of the chat's text: it goes with the chat (docs/sharing.md)
        done.items += db.shares.delete_links(user_id, committed)
    return done


def _rows(db: Operator, user_id: str) -> dict[str, list[dict]]:
    """The user's sidebar rows and temporary chats' rows by session (lib.storage.operator.Operator.chat_rows)."""
    rows: dict[str, list[dict]] = {}
    for row in db.chat_rows(user_id):
        if keys.record_kind(row["sk"]) in (keys.LIST_ROW, keys.TEMPORARY):
            rows.setdefault(keys.row_session_id(row["sk"]), []).append(row)
    return rows


def _partition_keys(db: Operator, user_id: str, session_id: str) -> list[dict]:
    return db.session_keys(user_id, session_id)


def _kinds_of(db: Operator, user_id: str, sessions: list[str], rows: dict, markers: list[dict]) -> Counter:
    """What a dry run would delete, by record kind: the same reads as its item count (a second time: a dry run's
    budget is not the point)."""
    kinds: Counter = Counter({keys.PURGE: len(markers)} if markers else {})
    for session_id in sessions:
        kinds[keys.LIST_ROW] += len(rows.get(session_id, ()))
        items = [
            *_partition_keys(db, user_id, session_id),
            *db.user_partition(user_id, keys.session_vector_prefix(session_id)),
        ]
        kinds.update(keys.record_kind(i["sk"]) for i in items)
    return kinds
