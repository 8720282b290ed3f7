"""Memories and the memory off switch, in the user's own partition (MEM#<id>, PREF#memory).

One Query reads both (MEM# .. PREF#~). A memory's id is a hash of its normalised text,
so two tabs extracting the same fact at once Put the same key and the condition
`attribute_not_exists(pk)` keeps one (add-only de-duplication without a read). Items
have seed 004's shape (user_id, kind, text, source, created); semantic search adds
`embedding` later, which is why `user_id` and `kind` are attributes, not only key parts.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from lib.errors import EmptyMessage, InvalidInstructions, MemoryNotFound
from lib.storage import keys
from lib.storage.capacity import Meter
from lib.storage.gateway import (
    Gateway,
    from_item,
    on_condition_failed,
    storable_text,
    to_item,
)
from lib.storage.records import INSTRUCTIONS_MAX_CHARS, Instructions, Memory

MEMORY_SWITCH = "memory"
INSTRUCTIONS = "instructions"  # PREF#instructions: the user's custom instructions (lib.storage.records.Instructions)
MEMORY_TEXT_MAX = 500  # characters: a memory is one fact, not a document


def normalise(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def memory_id(text: str) -> str:
    """The same fact (case, spacing and punctuation aside) always gets the same id."""
    return hashlib.sha256(normalise(text).encode("utf-8")).hexdigest()[:20]


# What `load` reads of a memory or preference item (its `embedding` is the index's business, not the prompt's).
_LOADED = (
    "pk, sk, user_id, #text, #kind, source_session_id, source_message_id, create_time, update_time, enabled, "
    "about, #style"
)
_LOADED_NAMES = {"#text": "text", "#kind": "kind", "#style": "style"}  # reserved words in an expression


class MemoryStore:
    def __init__(self, client: Any, table: str, meter: Meter | None = None):
        self._db = Gateway(client, table, meter)

    @classmethod
    def over(cls, db: Gateway) -> MemoryStore:
        """The memory store of the table another store's gateway talks to (its client and meter)."""
        return cls(db.client, db.table, db.meter)

    def load(self, user_id: str, *, action: str = "memory") -> tuple[list[Memory], bool]:
        """(memories oldest first, enabled) in 1 Query (more only past 1 MB, which the token cap never reaches)."""
        memories, enabled, _ = self.load_all(user_id, action=action)
        return memories, enabled

    def load_all(self, user_id: str, *, action: str = "memory") -> tuple[list[Memory], bool, Instructions]:
        """The memories, the off switch and the custom instructions: the same 1 Query (PREF# is in the range)."""
        pk, low, high = keys.memory_range(user_id)
        with self._db.action(action, user_id):
            items = self._db.query_all(
                KeyConditionExpression="pk = :pk AND sk BETWEEN :low AND :high",
                # Everything but the vector: the same units (billed on whole items), half the time to parse
                ProjectionExpression=_LOADED,
                ExpressionAttributeNames=_LOADED_NAMES,
                ExpressionAttributeValues=to_item({":pk": pk, ":low": low, ":high": high}),
                ConsistentRead=True,
            )
        memories, enabled, instructions = [], True, Instructions()
        for raw in items:
            item = from_item(raw)
            kind = keys.record_kind(item["sk"])
            if kind == keys.MEMORY:
                memory = Memory.from_item(item)
                if memory is not None:
                    memories.append(memory)
            elif kind == keys.PREFERENCE and item["sk"] == keys.preference_key(user_id, MEMORY_SWITCH)["sk"]:
                enabled = bool(item.get("enabled", True))
            elif kind == keys.PREFERENCE and item["sk"] == keys.preference_key(user_id, INSTRUCTIONS)["sk"]:
                instructions = Instructions(
                    str(item.get("about", "")), str(item.get("style", "")), item.get("update_time")
                )
        memories.sort(key=lambda m: (m.create_time, m.memory_id))
        return memories, enabled, instructions

    def set_instructions(self, user_id: str, about: str, style: str) -> Instructions:
        """Save the user's custom instructions (1 PutItem; both empty: 1 DeleteItem). InvalidInstructions over
        INSTRUCTIONS_MAX_CHARS, before any request."""
        about, style = storable_text(str(about)).strip(), storable_text(str(style)).strip()
        for name, text in (("About you", about), ("How to answer", style)):
            if len(text) > INSTRUCTIONS_MAX_CHARS:
                raise InvalidInstructions(
                    f"{name} is {len(text):,} characters; at most {INSTRUCTIONS_MAX_CHARS:,}. Shorten it, then save."
                )
        key = keys.preference_key(user_id, INSTRUCTIONS)
        saved = Instructions(about, style, keys.now())
        with self._db.action("memory", user_id):
            if saved.empty:
                self._db.call("delete_item", Key=to_item(key))
                return Instructions()
            self._db.call(
                "put_item",
                Item=to_item(
                    {**key, "user_id": user_id, "about": about, "style": style, "update_time": saved.update_time}
                ),
            )
        return saved

    def add(
        self, user_id: str, text: str, *, session_id: str | None, message_id: str | None, at: str | None = None
    ) -> Memory | None:
        """Put one memory (1 PutItem); None if the same fact is already stored (its key exists)."""
        text = storable_text(" ".join(text.split()))[:MEMORY_TEXT_MAX]
        memory = Memory(memory_id(text), user_id, text, session_id, message_id, at or keys.now())
        item = to_item(
            {
                **keys.memory_key(user_id, memory.memory_id),
                "user_id": user_id,
                "kind": memory.kind,
                "text": text,
                "source_session_id": session_id,
                "source_message_id": message_id,
                "create_time": memory.create_time,
            }
        )
        with on_condition_failed() as exists, self._db.action("memory", user_id):
            # add-only: an existing memory (the same fact, or another tab's identical extraction) is kept
            self._db.call("put_item", Item=item, ConditionExpression="attribute_not_exists(pk)")
        return None if exists else memory

    def edit(self, user_id: str, memory: Memory, text: str) -> Memory:
        """Change a memory's text in place (1 UpdateItem): the id stays, so its source and history do too."""
        text = storable_text(" ".join(text.split()))[:MEMORY_TEXT_MAX]
        if not text:
            raise EmptyMessage("A memory cannot be empty; delete it instead.")
        at = keys.now()
        with (
            on_condition_failed(MemoryNotFound("That memory was deleted (perhaps in another tab).")),
            self._db.action("memory", user_id),
        ):
            # the memory must still exist: an edit never resurrects one deleted in another tab
            self._db.call(
                "update_item",
                Key=to_item(keys.memory_key(user_id, memory.memory_id)),
                UpdateExpression="SET #text = :text, update_time = :at REMOVE embedding",
                ConditionExpression="attribute_exists(pk)",
                ExpressionAttributeNames={"#text": "text"},
                ExpressionAttributeValues=to_item({":text": text, ":at": at}),
            )
        return Memory(
            memory.memory_id,
            user_id,
            text,
            memory.source_session_id,
            memory.source_message_id,
            memory.create_time,
            memory.kind,
            at,
        )

    def delete(self, user_id: str, memory_id_: str) -> None:
        """Delete one memory (1 DeleteItem); deleting one already gone is not an error."""
        with self._db.action("memory", user_id):
            self._db.call("delete_item", Key=to_item(keys.memory_key(user_id, memory_id_)))

    def set_enabled(self, user_id: str, enabled: bool) -> None:
        """The user's off switch (1 PutItem): off means no extraction and no memory block; memories are kept."""
        with self._db.action("memory", user_id):
            self._db.call(
                "put_item",
                Item=to_item(
                    {
                        **keys.preference_key(user_id, MEMORY_SWITCH),
                        "user_id": user_id,
                        "enabled": enabled,
                        "update_time": keys.now(),
                    }
                ),
            )
