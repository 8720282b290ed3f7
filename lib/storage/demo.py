"""Demo history in batches: the items a chat's live verbs leave behind, written with BatchWriteItem.

A chat the store writes turn by turn (create_session, send_message, finish_message or fail_message, rename_session)
ends as a meta, one sidebar row at its last turn's time and title, and its finished turns. `chat_items` builds
exactly those with the store's own item builders (lib.storage.items), so a demo chat reads, checks (`python -m
lib.admin check`) and exports like a typed one; `put` writes them 25 a request, labelled "admin" for the meter
(the cost page counts them as what they are, a batch load, never as sends or saves). Only lib/turn/demo.py uses it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from lib.storage import items, keys, seen
from lib.storage.capacity import Meter
from lib.storage.gateway import Gateway, storable_text, to_item
from lib.storage.itemsize import item_size
from lib.storage.records import DONE, Message, Session

ACTION = "admin"  # a batch load of history, like the operator's import-table


def turn_item(user_id: str, message: Message) -> tuple[dict, Message]:
    """A finished (done or failed) turn's item as the store leaves it, and the Message with its stored size.

    The pending item of `items.pending_message`, completed as ChatStore._complete completes it: the answer (cut to
    the item limit), its figures, `error` on a failed turn only, no None attribute."""
    m = message
    item, _ = items.pending_message(
        user_id, m.session_id, m.input_body, m.system_prompt_id, m.create_time, m.message_id
    )
    fields = {
        "input_token": message.input_token,
        "output_token": message.output_token,
        "response_start_time": message.response_start_time,
        "response_end_time": message.response_end_time,
        "model": message.model,
        "error": message.error if message.status != DONE else None,
        "context": seen.encode(seen.compact(message.context)) or None,
        "tokens_estimated": True if getattr(message, "tokens_estimated", False) else None,
    }
    fields = {k: storable_text(v) if isinstance(v, str) else v for k, v in fields.items() if v is not None}
    body, truncated = items.fit_answer(user_id, message, storable_text(message.output_body), fields)
    item.update(to_item({**fields, "output_body": body, "output_truncated": truncated, "status": message.status}))
    return item, replace(message, output_body=body, output_truncated=truncated, size=item_size(item))


def chat_items(user_id: str, session: Session, turns: Sequence[Message]) -> list[dict]:
    """Every item of one finished chat: its meta, its sidebar row (at the last turn's time) and its turns."""
    return [items.meta_item(user_id, session), items.list_item(user_id, session)] + [
        turn_item(user_id, m)[0] for m in turns
    ]


class DemoHistory:
    """Batch writes of demo chats to one table, through its (metered) client."""

    def __init__(self, client: Any, table: str, meter: Meter | None = None):
        self._db = Gateway(client, table, meter)

    def put_chats(self, user_id: str, chat_items: Sequence[dict]) -> int:
        """Put these items of one user's chats (BatchWriteItem, 25 a request); returns how many."""
        with self._db.action(ACTION, user_id):
            return self._db.batch_write(puts=chat_items)

    def register(self, user_id: str, first_time: str, last_create_time: str) -> None:
        """The user in the registry, as create_session leaves it (1 UpdateItem; an earlier first_time is kept)."""
        with self._db.action(ACTION, user_id):
            self._db.call(
                "update_item",
                Key=to_item(keys.registry_key(user_id)),
                UpdateExpression="SET user_id = :u, first_time = if_not_exists(first_time, :first), "
                "last_create_time = :last",
                ExpressionAttributeValues=to_item({":u": user_id, ":first": first_time, ":last": last_create_time}),
            )
