"""Usage-ledger buckets: one item per UTC day and user (pk USAGE#<day>, sk USER#<user_id>), counters added with ADD.

The ledger (lib/usage/ledger.py) decides what to count and when to flush; this module owns the requests: one
UpdateItem per bucket written, one Query per day for every user's buckets, one BatchGetItem per 100 days for one
user's. Each is labelled "ledger" for the meter, for the user it serves (None: the system's own).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from lib.storage import keys
from lib.storage.capacity import Meter
from lib.storage.gateway import Gateway, from_item, to_item

ACTION = "ledger"


def _number(value: float) -> Decimal:
    """DynamoDB numbers are decimals: counts are integers, capacity units halves at finest."""
    return Decimal(int(value)) if float(value).is_integer() else Decimal(repr(float(value)))


class UsageBuckets:
    """The usage buckets of one table, through its (metered) client."""

    def __init__(self, client: Any, table: str, meter: Meter | None = None):
        self._db = Gateway(client, table, meter)

    def add(self, day: str, user: str, counts: Mapping[str, float], *, billed_to: str | None) -> None:
        """Add these counters to the (day, user) bucket (1 UpdateItem; ADD creates the bucket and any counter)."""
        names = {f"#c{i}": name for i, name in enumerate(counts)}
        values = {f":c{i}": _number(value) for i, value in enumerate(counts.values())}
        with self._db.action(ACTION, billed_to):
            self._db.call(
                "update_item",
                Key=to_item(keys.usage_key(day, user)),
                UpdateExpression="ADD " + ", ".join(f"#c{i} :c{i}" for i in range(len(counts))),
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=to_item(values),
            )

    def read(
        self, days: Iterable[str], *, user: str | None = None, billed_to: str | None = None, action: str = ACTION
    ) -> list[tuple[str, str, dict[str, Any]]]:
        """(day, user, counters) of the stored buckets of these days: every user's (one Query per day), or only
        `user`'s (one eventually consistent BatchGetItem per 100 days). `action`: the meter's label ("limits" for
        the spend check before a turn)."""
        days = list(days)
        with self._db.action(action, billed_to):
            if user is not None:
                items = self._db.batch_get([keys.usage_key(day, user) for day in days], consistent=False)
            else:
                items = [
                    i
                    for day in days
                    for i in self._db.query_all(
                        KeyConditionExpression="pk = :pk",
                        ExpressionAttributeValues=to_item({":pk": keys.usage_pk(day)}),
                    )
                ]
        found = []
        for item in items:
            plain = from_item(item)
            day, owner = keys.usage_parts(plain.pop("pk"), plain.pop("sk"))
            found.append((day, owner, plain))
        return found
