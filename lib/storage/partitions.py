"""Whole-partition reads: every item (or every turn) of one session, every item of a user's own partition.

One Query per 1 MB page, following LastEvaluatedKey. The chat store (export), the indexer (reindex), the
invariant checker and the operator's deletions all read a session this way, so the request is written once.
"""

from __future__ import annotations

from typing import Any

from lib.storage import keys
from lib.storage.gateway import Gateway, from_item, to_item
from lib.storage.itemsize import item_size
from lib.storage.records import PENDING, Message


def session_items(
    db: Gateway,
    user_id: str,
    session_id: str,
    *,
    turns_only: bool = False,
    pending_only: bool = False,
    projection: str | None = None,
    names: dict[str, str] | None = None,
    consistent: bool = True,
) -> list[dict]:
    """The items of one session partition in sort-key order (wire format): all of them, or only its turns
    (MSG#...), optionally only the pending ones (a FilterExpression: billed on every turn read); `projection`
    (with its #names) keeps bodies out when a caller needs only keys and small attributes."""
    prefix = keys.MESSAGE_PREFIX if turns_only or pending_only else ""
    pending = ("#status = :pending", {"#status": "status"}, {":pending": PENDING}) if pending_only else None
    return _partition(db, keys.session_pk(user_id, session_id), prefix, projection, names, consistent, pending)


def session_turns(db: Gateway, user_id: str, session_id: str, *, consistent: bool = True) -> list[Message]:
    """Every turn of a session, oldest first (records of other kinds skipped)."""
    return [
        Message.from_item(from_item(i), size=item_size(i))
        for i in session_items(db, user_id, session_id, turns_only=True, consistent=consistent)
        if keys.record_kind(i["sk"]["S"]) == keys.TURN
    ]


def user_items(
    db: Gateway,
    user_id: str,
    prefix: str = "",
    *,
    projection: str | None = None,
    names: dict[str, str] | None = None,
    consistent: bool = True,
) -> list[dict]:
    """The items of a user's own partition (pk USER#<id>: sidebar rows, memories, vectors, markers), optionally only
    those whose sort key starts with `prefix`, in sort-key order (wire format)."""
    return _partition(db, keys.user_pk(user_id), prefix, projection, names, consistent, None)


def project_items(
    db: Gateway,
    user_id: str,
    project_id: str,
    *,
    projection: str | None = None,
    names: dict[str, str] | None = None,
) -> list[dict]:
    """The items of one project partition (its meta and its chats' rows: docs/projects.md), wire format."""
    return _partition(db, keys.project_pk(user_id, project_id), "", projection, names, True, None)


def _partition(
    db: Gateway,
    pk: str,
    prefix: str,
    projection: str | None,
    names: dict[str, str] | None,
    consistent: bool,
    filtered: tuple[str, dict[str, str], dict[str, Any]] | None,
) -> list[dict]:
    """Every item of partition `pk` whose sort key starts with `prefix` ('' for all), after an optional filter
    (expression, its #names, its :values)."""
    values: dict[str, Any] = {":pk": pk}
    params: dict[str, Any] = {"KeyConditionExpression": "pk = :pk"}
    if prefix:
        params["KeyConditionExpression"] = "pk = :pk AND begins_with(sk, :p)"
        values[":p"] = prefix
    names = dict(names or {})
    if filtered is not None:
        params["FilterExpression"] = filtered[0]  # status is a reserved word: its #name comes with it
        names.update(filtered[1])
        values.update(filtered[2])
    if projection:
        params["ProjectionExpression"] = projection
    if names:
        params["ExpressionAttributeNames"] = names
    if consistent:
        params["ConsistentRead"] = True
    return db.query_all(ExpressionAttributeValues=to_item(values), **params)
