"""Retention and the pending sweep, for every registered user.

Retention removes whole sessions whose last message is older than the cutoff (row, meta, turns and
what hangs off them, together; lib/ops/deletion.py), so the per-session invariants hold. Per-item TTL
is not used for it: DynamoDB's TTL deletes items one by one, days late and in no order, so a session's
row could outlive its meta or its turns (or the reverse) for days.

The sweep marks turns left pending by a crashed process as failed, as the page would show them.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from botocore.exceptions import ClientError

from lib.ops.deletion import Deleted, delete_sessions, user_partition
from lib.ops.users import registered_users
from lib.storage import keys
from lib.storage.gateway import Gateway, error_code, from_item, to_item
from lib.storage.records import FAILED, PENDING

INTERRUPTED = "Interrupted: the app stopped before the answer was saved."


def _utcnow() -> dt.datetime:
    return keys.parse_time(keys.now())


def retention(db: Gateway, older_than_days: float, *, dry_run: bool, now: dt.datetime | None = None
              ) -> dict[str, Deleted]:
    """Delete every session last active before now - older_than_days, for every user; per-user results."""
    if older_than_days <= 0:
        raise ValueError("--older-than must be a positive number of days")
    cutoff = keys.format_time((now or _utcnow()) - dt.timedelta(days=older_than_days))
    results: dict[str, Deleted] = {}
    for user_id in registered_users(db):
        # sidebar rows sort by last_message_time: the old ones are one key range
        old = [from_item(i)["session_id"] for i in db.query_all(
            KeyConditionExpression="pk = :pk AND sk BETWEEN :low AND :high", ConsistentRead=True,
            ProjectionExpression="session_id",
            ExpressionAttributeValues=to_item({":pk": keys.user_pk(user_id), ":low": keys.SESSION_PREFIX,
                                               ":high": keys.list_row_bound(cutoff)}))]
        deleted = delete_sessions(db, user_id, old, dry_run=dry_run)
        if deleted.sessions:
            results[user_id] = deleted
    return results


@dataclass
class Swept:
    found: list[tuple[str, str, str]] = field(default_factory=list)  # (user, session, message)
    marked: int = 0
    changed_meanwhile: int = 0


def sweep_pending(db: Gateway, older_than_s: float, *, dry_run: bool, within_days: float = 30,
                  now: dt.datetime | None = None) -> Swept:
    """Mark as failed every turn still pending older_than_s after it started, in sessions active within_days."""
    now = now or _utcnow()
    cutoff = keys.format_time(now - dt.timedelta(seconds=older_than_s))
    recent = keys.list_row_bound(keys.format_time(now - dt.timedelta(days=within_days)))
    swept = Swept()
    for user_id in registered_users(db):
        rows = [r for r in user_partition(db, user_id, keys.SESSION_PREFIX) if r["sk"] >= recent]
        for row in rows:
            for turn in map(from_item, db.query_all(
                    KeyConditionExpression="pk = :pk AND begins_with(sk, :m)", FilterExpression="#status = :pending",
                    ProjectionExpression="message_id, create_time, attempt_time", ConsistentRead=True,
                    ExpressionAttributeNames={"#status": "status"},
                    ExpressionAttributeValues=to_item({":pk": keys.session_pk(user_id, row["session_id"]),
                                                       ":m": keys.MESSAGE_PREFIX, ":pending": PENDING}))):
                if max(turn["create_time"], turn.get("attempt_time", "")) >= cutoff:
                    continue  # still within its time: its process may be answering it right now
                swept.found.append((user_id, row["session_id"], turn["message_id"]))
                if not dry_run:
                    _mark_failed(db, user_id, row["session_id"], turn["message_id"], cutoff, swept)
    return swept


def _mark_failed(db: Gateway, user_id: str, session_id: str, message_id: str, cutoff: str, swept: Swept) -> None:
    try:
        with db.action("admin", user_id):
            db.call("update_item", Key=to_item(keys.message_key(user_id, session_id, message_id)),
                    UpdateExpression="SET #status = :failed, #error = :why, response_end_time = :now",
                    # still pending and not restarted since we looked (a Retry sets attempt_time to now)
                    ConditionExpression="#status = :pending AND (attribute_not_exists(attempt_time) OR "
                                        "attempt_time < :cutoff)",
                    ExpressionAttributeNames={"#status": "status", "#error": "error"},
                    ExpressionAttributeValues=to_item({":failed": FAILED, ":pending": PENDING, ":why": INTERRUPTED,
                                                       ":now": keys.now(), ":cutoff": cutoff}))
        swept.marked += 1
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise
        swept.changed_meanwhile += 1
