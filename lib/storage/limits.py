"""Spend-limit records: one item per scope (pk LIMITS, sk DEFAULT / GROUP#<group> / USER#<user_id>), set by admins
on the Spend limits page; they override the limits file's entry of the same scope (docs/limits.md).

Requests: reading them all is 1 Query of the LIMITS partition (eventually consistent: a few hundred bytes per
record, 0.5 RRU per 4 KB), made at most once per cache period per process; saving one is 1 PutItem, removing one
1 DeleteItem (1 WRU each). Each is labelled "limits" for the meter.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from lib.storage import keys
from lib.storage.capacity import Meter
from lib.storage.gateway import Gateway, from_item, to_item

ACTION = "limits"


@dataclass(frozen=True)
class LimitRecord:
    """One scope's limits as stored: USD per UTC day and month (None: not set at this scope)."""

    kind: str  # "default", "group" or "user"
    name: str | None
    day: float | None
    month: float | None
    updated_by: str = ""
    update_time: str = ""


def _number(value: float) -> Decimal:
    return Decimal(repr(float(value)))


class LimitRecords:
    """The spend-limit records of one table, through its (metered) client."""

    def __init__(self, client: Any, table: str, meter: Meter | None = None):
        self._db = Gateway(client, table, meter)

    def read_all(self, *, reader: str | None = None) -> list[LimitRecord]:
        """Every scope's record (1 Query, eventually consistent); a malformed item is skipped."""
        with self._db.action(ACTION, reader):
            items = self._db.query_all(
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues=to_item({":pk": keys.LIMITS_PK}),
                ConsistentRead=False,
            )
        found = []
        for item in items:
            plain = from_item(item)
            try:
                kind, name = keys.limit_parts(plain["sk"])
            except ValueError:
                continue
            found.append(
                LimitRecord(
                    kind,
                    name,
                    float(plain["day"]) if "day" in plain else None,
                    float(plain["month"]) if "month" in plain else None,
                    str(plain.get("updated_by", "")),
                    str(plain.get("update_time", "")),
                )
            )
        return found

    def put(self, record: LimitRecord, *, actor: str) -> None:
        """Write the scope's record whole (1 PutItem, unconditional: the last admin's save wins)."""
        item: dict[str, Any] = {
            **keys.limit_key(record.kind, record.name),
            "updated_by": actor,
            "update_time": keys.now(),
        }
        if record.day is not None:
            item["day"] = _number(record.day)
        if record.month is not None:
            item["month"] = _number(record.month)
        with self._db.action(ACTION, actor):
            self._db.call("put_item", Item=to_item(item))

    def delete(self, kind: str, name: str | None, *, actor: str) -> None:
        """Remove the scope's record (1 DeleteItem); the limits file's entry, if any, applies again."""
        with self._db.action(ACTION, actor):
            self._db.call("delete_item", Key=to_item(keys.limit_key(kind, name)))
