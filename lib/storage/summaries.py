"""Running summaries in the session partition: one item (SUM#RUNNING), versioned, written conditionally.

Race: two tabs or replicas finishing turns at once both read version v with the page,
both summarise, both write `version = v` -> v + 1; the condition lets exactly one win.
The loser's result is dropped (SummaryChanged): the winner's summary covers the same
turns or more, and the next finished turn summarises whatever is left. Turns are
never deleted or changed by summarising.
"""

from __future__ import annotations

from typing import Any

from lib.errors import SummaryChanged
from lib.storage import keys
from lib.storage.capacity import Meter
from lib.storage.gateway import Gateway, from_item, on_condition_failed, to_item
from lib.storage.itemsize import item_size
from lib.storage.records import Message, Summary


class SummaryStore:
    """Read and write a session's running summary, and read the turns a summary or recall needs."""

    def __init__(self, client: Any, table: str, meter: Meter | None = None):
        self._db = Gateway(client, table, meter)

    def get(self, user_id: str, session_id: str, *, action: str = "summary") -> Summary | None:
        """The current summary (1 consistent GetItem), or None. The page gets it free with open_session."""
        with self._db.action(action, user_id):
            response = self._db.call(
                "get_item", Key=to_item(keys.summary_key(user_id, session_id)), ConsistentRead=True
            )
        return Summary.from_item(from_item(response["Item"])) if "Item" in response else None

    def put(self, user_id: str, summary: Summary, *, previous: int | None) -> Summary:
        """Write `summary` as version previous + 1 (1 PutItem); SummaryChanged if the stored version moved on."""
        version = (previous or 0) + 1
        item = to_item(
            {
                **keys.summary_key(user_id, summary.session_id),
                "session_id": summary.session_id,
                "user_id": user_id,
                "text": summary.text,
                "version": version,
                "covered_until": summary.covered_until,
                "covered_turns": summary.covered_turns,
                "method": summary.method,
                "model": summary.model,
                "update_time": summary.update_time,
                "tokens": summary.tokens,
            }
        )
        if previous is None:  # the first summary: no other finisher may have written one meanwhile
            condition: dict[str, Any] = {"ConditionExpression": "attribute_not_exists(pk)"}
        else:  # only over the version we summarised from: two finishers cannot both win
            condition = {
                "ConditionExpression": "version = :old",
                "ExpressionAttributeValues": to_item({":old": previous}),
            }
        with (
            on_condition_failed(SummaryChanged("The summary was updated elsewhere first; this one was dropped.")),
            self._db.action("summary", user_id),
        ):
            self._db.call("put_item", Item=item, **condition)
        return Summary(
            summary.session_id,
            summary.text,
            version,
            summary.covered_until,
            summary.covered_turns,
            summary.method,
            summary.model,
            summary.update_time,
            summary.tokens,
        )

    def forget(self, user_id: str, session_id: str, version: int) -> bool:
        """Delete the summary at `version` (1 conditional DeleteItem): a turn it covers got a new version, so it
        no longer says what the chat says. False when another writer replaced it first (that one is newer)."""
        with on_condition_failed() as replaced, self._db.action("summary", user_id):
            self._db.call(
                "delete_item",
                Key=to_item(keys.summary_key(user_id, session_id)),
                ConditionExpression="version = :v",
                ExpressionAttributeValues=to_item({":v": version}),
            )
        return not replaced

    def turns_after(
        self, user_id: str, session_id: str, after_message_id: str | None, *, action: str = "summary"
    ) -> list[Message]:
        """Every turn newer than `after_message_id` (all turns if None), oldest first (1 Query per 1 MB).

        Used after an answer is saved, never on the path to the first token."""
        pk = keys.session_pk(user_id, session_id)
        low = keys.message_sk(after_message_id) if after_message_id else keys.MESSAGE_PREFIX
        with self._db.action(action, user_id):
            items = self._db.query_all(
                KeyConditionExpression="pk = :pk AND sk BETWEEN :low AND :high",
                ConsistentRead=True,
                ExpressionAttributeValues=to_item({":pk": pk, ":low": low, ":high": keys.MESSAGE_PREFIX + "~"}),
            )
        return [
            Message.from_item(from_item(i), size=item_size(i))
            for i in items
            if keys.record_kind(i["sk"]["S"]) == keys.TURN and i["sk"]["S"] != low
        ]

    def turns_by_id(
        self, user_id: str, session_id: str, message_ids: list[str], *, action: str = "recall"
    ) -> list[Message]:
        """These turns of one chat (those that exist), by id, in 1 eventually consistent BatchGetItem (up to 100):
        recall's one read of the older turns the vector index found, sized by what is found, not by the chat."""
        if not message_ids:
            return []
        with self._db.action(action, user_id):
            found = self._db.batch_get(
                [keys.message_key(user_id, session_id, m) for m in dict.fromkeys(message_ids) if keys.is_id(m)],
                consistent=False,
            )
        turns = [Message.from_item(from_item(i), size=item_size(i)) for i in found if keys.is_message_sk(i["sk"]["S"])]
        return sorted(turns, key=lambda m: m.message_id)
