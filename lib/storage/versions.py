"""Versions of a turn: Regenerate and Edit keep every earlier answer; the turn item holds the one selected.

A turn item (MSG#<message_id>) always holds its selected version, so opening a chat, the live view, search,
export, recall and "What the model saw" read the selected answer with no extra request. `version` is the
selected one's number, `versions` how many there are (both absent on a turn never regenerated: 1 and 1), and
`kept` the numbers that have a version record:

    version record  pk USER#<user>#SES#<session>  sk ALT#<message_id>#<nnn>   (keys.version_key)

holding that version's question, answer, status, times, token counts, model, feedback and context. `ALT#`
sorts before `MSG#`, and the open Query reads `sk >= MSG#`, so no page read meets a version record.
Invariant (`admin check`): every version but the selected one is in `kept`, and every kept one has its record.
A version is written once, when it stops being selected; a finished version never changes again (its
feedback can only be set while it is selected, and is in its record when it leaves).

Regenerate (or Edit of the question): the selected version is kept, then the turn becomes pending as version
`versions + 1` (Edit: with the new question) and is answered again as a Retry is. One TransactWriteItems of
the version record and the turn (1 UpdateItem when the selected version already has its record). Flip: 1
consistent GetItem of the chosen version's record, then the same transaction (or 1 UpdateItem) that keeps the
selected version and copies the chosen one into the turn. Both are conditional on the turn as the tab saw
it (its selected version, its count, its status and its feedback), so two tabs changing one turn at once
leave one result: the second is refused (VersionChanged) and reloads, and nothing is duplicated or lost.
"""

from __future__ import annotations

from typing import Any

from lib.errors import MessageNotFound, VersionChanged
from lib.storage import items, keys, seen
from lib.storage.gateway import Gateway, from_item, on_condition_failed, storable_text, to_item
from lib.storage.itemsize import item_size
from lib.storage.records import DONE, FAILED, PENDING, Message, Session

MAX_VERSIONS = 50  # versions of one turn; past it Regenerate and Edit are refused (keys.version_key: 3 digits)
# What a version holds: everything a Regenerate replaces. The turn's identity (ids, create_time) and its
# version bookkeeping are the item's, not a version's.
VERSION_FIELDS = (
    "input_body",
    "system_prompt_id",
    "status",
    "output_body",
    "output_truncated",
    "response_start_time",
    "response_end_time",
    "input_token",
    "output_token",
    "model",
    "error",
    "feedback",
    "attempt_time",
    "tokens_estimated",
    "context",
    "input_object",  # a long body's pointer (lib/storage/bodies.py): a kept version keeps its object
    "output_object",
)


def snapshot(message: Message) -> dict[str, Any]:
    """A version's fields as stored (plain values; absent ones left out)."""
    values = {
        "input_body": message.input_body,
        "system_prompt_id": message.system_prompt_id,
        "status": message.status,
        "output_body": message.output_body,
        "output_truncated": message.output_truncated,
        "response_start_time": message.response_start_time,
        "response_end_time": message.response_end_time,
        "input_token": message.input_token,
        "output_token": message.output_token,
        "model": message.model,
        "error": message.error,
        "feedback": message.feedback,
        "attempt_time": message.attempt_time,
        "tokens_estimated": True if message.tokens_estimated else None,
        "context": seen.encode(seen.compact(message.context)) if message.context else None,
        "input_object": message.input_ref.record() if message.input_ref else None,
        "output_object": message.output_ref.record() if message.output_ref else None,
        "expire_at": message.expire_at,  # a temporary chat's version record goes when its turn does
    }
    return {k: v for k, v in values.items() if v is not None and v != ""} | {"output_body": message.output_body}


class VersionStore:
    """The version records of a session partition and the turn updates that select one."""

    def __init__(self, db: Gateway):
        self._db = db

    def regenerate(
        self, user_id: str, message: Message, *, question: str | None = None, newest_of: Session | None = None
    ) -> Message:
        """Keep the selected version, then make the turn pending as a new version (with `question`, an Edit).
        Returns the pending turn as stored. VersionChanged when the turn is not as the tab saw it; with
        `newest_of` (an Edit: only of the newest question), also when the chat moved on since the tab saw it
        (a later question was sent), checked in the same transaction."""
        if message.status not in (DONE, FAILED):
            raise VersionChanged("This answer is still being written: stop it first, then answer again.")
        if message.versions >= MAX_VERSIONS:
            raise VersionChanged(f"This turn has {MAX_VERSIONS} versions, the most one turn keeps.")
        new = message.versions + 1
        sets = {
            "#status": PENDING,
            "version": new,
            "versions": new,
            "attempt_time": keys.later_than(message.attempt_time or ""),
        }
        if question is not None:
            pending, _ = items.pending_message(
                user_id, message.session_id, question, message.system_prompt_id, message.create_time, message.message_id
            )  # the same checks as a new question: empty, or past the item's limit
            sets["input_body"] = from_item(pending)["input_body"]
        stays = ("input_body", "system_prompt_id", "status", "attempt_time")
        stays += ("input_object",) if question is None else ()  # an Edit's new question is inline
        removes = [f for f in VERSION_FIELDS if f not in stays]
        checks = []
        if newest_of is not None:
            checks.append(
                {
                    "ConditionCheck": {
                        "TableName": self._db.table,
                        "Key": to_item(keys.meta_key(user_id, newest_of.session_id)),
                        "ConditionExpression": "last_message_time = :seen",
                        "ExpressionAttributeValues": to_item({":seen": newest_of.last_message_time}),
                    }
                }
            )
        with self._db.action("regenerate", user_id, prior=_size(user_id, message)):
            return self._select(user_id, message, sets, removes, checks=checks)

    def flip(self, user_id: str, message: Message, version: int) -> Message:
        """Select version `version` of the turn (1 GetItem, then 1 write). VersionChanged when the turn is not
        as the tab saw it; MessageNotFound when that version's record is missing (reported by `admin check`)."""
        if not isinstance(version, int) or not 1 <= version <= message.versions or version == message.version:
            raise VersionChanged("That version does not exist any more; reload the chat.")
        if message.status == PENDING:
            raise VersionChanged("This answer is still being written: stop it first, then switch versions.")
        with self._db.action("version", user_id, prior=_size(user_id, message)):
            response = self._db.call(
                "get_item",
                Key=to_item(keys.version_key(user_id, message.session_id, message.message_id, version)),
                ConsistentRead=True,
            )
            if "Item" not in response:
                raise MessageNotFound(
                    f"Version {version} of this answer is missing from the table; an administrator's `admin check` "
                    "reports it."
                )
            chosen = from_item(response["Item"])
            sets = {("#status" if f == "status" else f): chosen[f] for f in VERSION_FIELDS if f in chosen}
            sets["version"] = version
            removes = [f for f in VERSION_FIELDS if f not in chosen]
            return self._select(user_id, message, sets, removes)

    def versions(self, user_id: str, message: Message) -> list[Message]:
        """Every kept version record of the turn, oldest first, as Messages (1 Query): export and `admin check`."""
        pk, low, high = keys.version_range(user_id, message.session_id, message.message_id)
        found = self._db.query_all(
            KeyConditionExpression="pk = :pk AND sk BETWEEN :low AND :high",
            ConsistentRead=True,
            ExpressionAttributeValues=to_item({":pk": pk, ":low": low, ":high": high}),
        )
        return [version_message(message, from_item(i), size=item_size(i)) for i in found]

    def _select(
        self, user_id: str, message: Message, sets: dict[str, Any], removes: list[str], *, checks: list = ()
    ) -> Message:
        """The turn's update (and, unless the selected version already has its record, that record's Put, and
        any `checks`, in one transaction), conditional on the turn as the tab saw it."""
        keep = message.version not in message.kept
        names = {"#status": "status"} | ({"#error": "error"} if "error" in removes or "error" in sets else {})
        assignments = ", ".join(f"{name} = :{name.lstrip('#')}" for name in sets)
        expression = f"SET {assignments}"
        values = {f":{name.lstrip('#')}": storable_text(v) if isinstance(v, str) else v for name, v in sets.items()}
        if keep:
            expression += " ADD kept :kept"
            values[":kept"] = {message.version}
        if removes:
            expression += " REMOVE " + ", ".join("#error" if f == "error" else f for f in removes)
        condition, guard = _as_seen(message)
        update = {
            "Key": to_item(keys.message_key(user_id, message.session_id, message.message_id)),
            "UpdateExpression": expression,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": to_item(values | guard),
        }
        refused = VersionChanged(
            "This turn was changed in another tab (a new answer or another version); reload the chat to see it."
        )
        if not keep and not checks:
            with on_condition_failed(refused):
                response = self._db.call("update_item", ReturnValues="ALL_NEW", **update)
            attributes = response["Attributes"]
            return Message.from_item(from_item(attributes), size=item_size(attributes))
        puts = []
        if keep:
            record = {
                **keys.version_key(user_id, message.session_id, message.message_id, message.version),
                "message_id": message.message_id,
                "session_id": message.session_id,
                "version": message.version,
                **snapshot(message),
            }
            puts.append({"Put": {"TableName": self._db.table, "Item": to_item(record)}})
        with on_condition_failed(refused):
            self._db.call(
                "transact_write_items",
                TransactItems=[*puts, {"Update": {"TableName": self._db.table, **update}}, *checks],
            )
        # A transaction returns no item: the turn as stored is what the tab saw with the update applied.
        return _applied(user_id, message, sets, removes)


def _size(user_id: str, message: Message) -> dict[tuple[str, str], int]:
    key = keys.message_key(user_id, message.session_id, message.message_id)
    return {(key["pk"], key["sk"]): message.size} if message.size else {}


def _as_seen(message: Message) -> tuple[str, dict]:
    """The turn exactly as the tab saw it: its selected version, their count, its status, its feedback."""
    parts, values = [], {":seen_status": message.status}
    if message.versions == 1 and message.version == 1:  # a turn never regenerated has no version attributes
        parts.append("(attribute_not_exists(versions) OR versions = :one)")
        values[":one"] = 1
    else:
        parts.append("versions = :seen_versions AND version = :seen_version")
        values |= {":seen_versions": message.versions, ":seen_version": message.version}
    parts.append("#status = :seen_status")
    if message.feedback is None:
        parts.append("attribute_not_exists(feedback)")
    else:
        parts.append("feedback = :seen_feedback")
        values[":seen_feedback"] = message.feedback
    return " AND ".join(parts), values


def _applied(user_id: str, message: Message, sets: dict[str, Any], removes: list[str]) -> Message:
    """The Message after an update whose values this store chose (no read needed), with its stored size."""
    item = {
        "message_id": message.message_id,
        "session_id": message.session_id,
        "create_time": message.create_time,
        **snapshot(message),
        "version": message.version,
        "versions": message.versions,
        "kept": message.kept | {message.version},
    }
    for name in removes:
        item.pop(name, None)
    for name, value in sets.items():
        item[name.lstrip("#")] = value
    stored = to_item({**keys.message_key(user_id, message.session_id, message.message_id), **item})
    return Message.from_item(item, size=item_size(stored))


def version_message(turn: Message, record: dict[str, Any], size: int = 0) -> Message:
    """A version record read back as the Message it was when selected."""
    item = {"message_id": turn.message_id, "session_id": turn.session_id, "create_time": turn.create_time, **record}
    item.pop("kept", None)
    return Message.from_item(item, size=size)
