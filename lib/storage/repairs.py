"""The writes of `python -m lib.admin repair` (lib/ops/repair.py decides which): each is one conditional write or
transaction made against the state the check saw, so a session the app changed meanwhile is left alone.

Each returns True when it was applied, False when its condition failed (the session changed since the check:
check again). Nothing here deletes chat text: only sidebar rows, which are copies of the meta.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lib.storage import items, keys
from lib.storage.gateway import Gateway, from_item, on_condition_failed, to_item
from lib.storage.projects import meta_condition as project_condition
from lib.storage.records import Session


class Repairs:
    """Repair writes on one table, through the operator's gateway (the same meter and error map)."""

    def __init__(self, db: Gateway):
        self._db = db

    def delete_row(self, row: Mapping[str, Any]) -> bool:
        """Delete one sidebar row whose session has no meta and no turns (1 DeleteItem)."""
        with on_condition_failed() as changed:
            self._db.call(
                "delete_item",
                Key=to_item({"pk": row["pk"], "sk": row["sk"]}),
                ConditionExpression="attribute_exists(pk)",
            )  # already gone: nothing to say it did
        return not changed

    def set_message_count(self, user_id: str, meta: Session, count: int) -> bool:
        """Set the meta's message_count to the turns stored (1 UpdateItem)."""
        with on_condition_failed() as changed:
            self._db.call(
                "update_item",
                Key=to_item(keys.meta_key(user_id, meta.session_id)),
                UpdateExpression="SET message_count = :n",
                ConditionExpression="last_message_time = :t",  # no send happened since the check counted
                ExpressionAttributeValues=to_item({":n": count, ":t": meta.last_message_time}),
            )
        return not changed

    def one_row(self, user_id: str, meta: Session, rows: Iterable[Mapping[str, Any]]) -> bool:
        """Leave exactly one sidebar row, at the meta's time with its title: one transaction that deletes the
        others and puts the right one."""
        right = items.list_item(user_id, meta)
        project, in_project = project_condition(meta)  # the row's project label is the meta's, as the check read it
        actions: list[dict] = [
            {
                "ConditionCheck": {  # the meta is still where the check saw it, pinned (or not) as it saw it
                    "TableName": self._db.table,
                    "Key": to_item(keys.meta_key(user_id, meta.session_id)),
                    "ConditionExpression": "last_message_time = :t AND title = :title AND "
                    + ("pinned_at = :pin" if meta.pinned_at else "attribute_not_exists(pinned_at)")
                    + f" AND {project}",
                    "ExpressionAttributeValues": to_item(
                        {":t": meta.last_message_time, ":title": meta.title, ":pin": meta.pinned_at, **in_project}
                    ),
                }
            }
        ]
        actions += [
            {"Delete": {"TableName": self._db.table, "Key": to_item({"pk": r["pk"], "sk": r["sk"]})}}
            for r in rows
            if r["sk"] != right["sk"]["S"]
        ]
        actions.append({"Put": {"TableName": self._db.table, "Item": right}})
        with on_condition_failed() as changed:
            self._db.call("transact_write_items", TransactItems=actions)
        return not changed

    def first_question(self, user_id: str, session_id: str, message_id: str) -> str:
        """The question of one turn (1 consistent GetItem, the body only): the title of a rebuilt meta."""
        item = self._db.call(
            "get_item",
            Key=to_item(keys.message_key(user_id, session_id, message_id)),
            ConsistentRead=True,
            ProjectionExpression="input_body",
        )["Item"]
        return from_item(item)["input_body"]

    def rebuild(self, user_id: str, session: Session) -> bool:
        """Write a new meta and sidebar row for orphaned turns (one transaction of 2 Puts)."""
        with on_condition_failed() as changed:
            self._db.call(
                "transact_write_items",
                TransactItems=[
                    {
                        "Put": {
                            "TableName": self._db.table,
                            "Item": items.meta_item(user_id, session),
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },  # a meta written meanwhile wins
                    {"Put": {"TableName": self._db.table, "Item": items.list_item(user_id, session)}},
                ],
            )
        return not changed
