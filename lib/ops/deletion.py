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

from dataclasses import dataclass, field
from typing import Iterable

from lib.ops.progress import Progress
from lib.storage import keys
from lib.storage.gateway import Gateway, from_item, to_item

MARKER_SESSIONS = 10_000  # session ids per marker item: 10,000 x 27 bytes stays far under 400 KB


@dataclass
class Deleted:
    sessions: int = 0
    items: int = 0
    session_ids: list[str] = field(default_factory=list)

    def add(self, other: "Deleted") -> None:
        self.sessions += other.sessions
        self.items += other.items
        self.session_ids += other.session_ids


def user_partition(db: Gateway, user_id: str, prefix: str = "") -> list[dict]:
    """Items of the user's own partition (plain values, keys and small attributes), optionally by sk prefix."""
    params = dict(KeyConditionExpression="pk = :pk", ExpressionAttributeValues=to_item({":pk": keys.user_pk(user_id)}),
                  ConsistentRead=True)
    if prefix:
        params.update(KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
                      ExpressionAttributeValues=to_item({":pk": keys.user_pk(user_id), ":p": prefix}))
    return [from_item(i) for i in db.query_all(ProjectionExpression="pk, sk, session_id, #ids",
                                               ExpressionAttributeNames={"#ids": "session_ids"}, **params)]


def interrupted(db: Gateway, user_id: str) -> list[str]:
    """Sessions an earlier deletion listed in its markers and did not finish."""
    ids: list[str] = []
    for marker in user_partition(db, user_id, keys.PURGE_PREFIX):
        ids += sorted(marker.get("session_ids", ()))
    return ids


def delete_sessions(db: Gateway, user_id: str, session_ids: Iterable[str], *, dry_run: bool,
                    show_progress: bool = False) -> Deleted:
    """Delete these sessions of the user (rows, partitions, vectors), finishing any interrupted deletion first."""
    pending = list(dict.fromkeys([*interrupted(db, user_id), *session_ids]))
    done = Deleted()
    if not pending:
        return done
    rows = [r for r in user_partition(db, user_id, keys.SESSION_PREFIX) if r.get("session_id") in set(pending)]
    if dry_run:
        done.sessions, done.session_ids = len(pending), pending
        done.items = len(rows) + sum(len(_partition_keys(db, user_id, s)) for s in pending)
        return done
    markers = [keys.purge_key(user_id, n) for n in range(0, (len(pending) - 1) // MARKER_SESSIONS + 1)]
    db.batch_write(puts=[to_item({**key, "session_ids": set(pending[n * MARKER_SESSIONS:(n + 1) * MARKER_SESSIONS])})
                         for n, key in enumerate(markers)])
    done.items += db.batch_write(deletes=[{"pk": r["pk"], "sk": r["sk"]} for r in rows])
    for session_id in Progress(pending, f"deleting {user_id}'s chats", force=show_progress):
        partition = _partition_keys(db, user_id, session_id)
        # the meta last: until it goes, `check` still sees whatever is left as this session's
        partition.sort(key=lambda k: k["sk"] == keys.META_SK)
        done.items += db.batch_write(deletes=partition)
        done.items += db.batch_write(deletes=[{"pk": v["pk"], "sk": v["sk"]}
                                              for v in user_partition(db, user_id, keys.session_vector_prefix(session_id))])
        done.sessions += 1
        done.session_ids.append(session_id)
    existing = [{"pk": m["pk"], "sk": m["sk"]} for m in user_partition(db, user_id, keys.PURGE_PREFIX)]
    db.batch_write(deletes=existing)
    return done


def _partition_keys(db: Gateway, user_id: str, session_id: str) -> list[dict]:
    return [from_item(i) for i in db.query_all(
        KeyConditionExpression="pk = :pk", ProjectionExpression="pk, sk", ConsistentRead=True,
        ExpressionAttributeValues=to_item({":pk": keys.session_pk(user_id, session_id)}))]
