"""Vector items and SearchVectors: the shapes semantic search reads and writes (keys from lib.storage.keys).

A turn's vector item (pk USER#<user_id>, sk VEC#<session_id>#<message_id>) is small and
separate from the turn: the open-session Query is billed on whole items, so a vector on the
turn item would grow every chat's first page. It carries `user_id` (the index's HASH: an item
without it is written but never indexed, seed 004), `kind` "turn" (the inline filter), the
session and message ids, a copy of the chat title, a bounded snippet (the question, " — ", the
answer's start), where its question ends (`snippet_q`) and whether it holds the whole turn
(`snippet_whole`: recall then sends it without reading the turn), the turn's time, `embed_model`
and `embedding`. A memory carries its vector on the memory item itself
(kind "memory"): deleting the memory takes its vector out of the index with it, and an edit
REMOVEs the vector (lib/storage/memories.py) until it is embedded again.

The vector is stored with 4 significant digits (float32 in the index anyway; cosine moves by
< 1e-3): a 256-d vector is about 1 KB, so a turn's vector item stays within 2 write units
(bench/search.py: 5 digits and a 600-character snippet made it 3).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from lib.storage import keys, partitions
from lib.storage.capacity import Meter
from lib.storage.gateway import Gateway, from_item, on_condition_failed, to_item
from lib.storage.records import Memory, Message
from lib.storage.schema import VECTOR_INDEX

TURN, MEMORY = "turn", "memory"
SNIPPET_CHARS = 400  # the stored snippet: what a result shows, bounded so a vector item stays small
SNIPPET_QUESTION_CHARS = 240  # ... of which the question's part at most
TITLE_CHARS = 120


def number_list(vector: Sequence[float]) -> list[Decimal]:
    """A vector as the item's list of numbers (4 significant digits: cosine moves by < 1e-3)."""
    return [Decimal(f"{float(x):.4g}") for x in vector]


@dataclass(frozen=True)
class TurnVector:
    session_id: str
    message_id: str
    title: str
    snippet: str
    create_time: str
    model: str
    vector: Sequence[float]
    question_chars: int | None = None  # the snippet's question part (then " — ", then the answer's)
    whole: bool = False  # the snippet is the whole turn (its whitespace collapsed)

    def item(self, user_id: str) -> dict[str, dict]:
        return to_item(
            {
                **keys.vector_key(user_id, self.session_id, self.message_id),
                "user_id": user_id,
                "kind": TURN,
                "session_id": self.session_id,
                "message_id": self.message_id,
                "title": self.title[:TITLE_CHARS],
                "snippet": self.snippet[:SNIPPET_CHARS],
                "create_time": self.create_time,
                "embed_model": self.model,
                "embedding": number_list(self.vector),
                **({"snippet_q": self.question_chars, "snippet_whole": self.whole} if self.question_chars else {}),
            }
        )


SNIPPET_SEPARATOR = " — "


def snippet_turn(item: dict[str, Any]) -> tuple[str, str, bool] | None:
    """(question, answer, whole) of a vector item's snippet: `whole` when the snippet is the turn itself, else
    the two sides' starts, each cut one ended with " …". An item written before snippets said where their question
    ends is split at its first separator (never whole); None when the snippet cannot be split into two sides."""
    text, cut = str(item.get("snippet", "")), item.get("snippet_q")
    if cut is None:
        cut = text.find(SNIPPET_SEPARATOR)
    elif not isinstance(cut, (int, Decimal)):
        return None
    cut = int(cut)
    if cut <= 0 or not text[cut:].startswith(SNIPPET_SEPARATOR) or len(text) <= cut + len(SNIPPET_SEPARATOR):
        return None
    question, answer = text[:cut], text[cut + len(SNIPPET_SEPARATOR) :]
    if "snippet_q" in item and item.get("snippet_whole") is True:
        return question, answer, True
    if cut >= SNIPPET_QUESTION_CHARS:
        question += " …"
    if len(text) >= SNIPPET_CHARS:
        answer += " …"
    return question, answer, False


@dataclass(frozen=True)
class Hit:
    """One SearchVectors result: the item (plain values, no vector) and its COSINE score (0 = identical)."""

    item: dict[str, Any]
    score: float


class VectorStore:
    """Reads and writes of vector items, each labelled for the meter ("index" writes, "search" searches), and the
    reads `reindex` makes to find what lacks a vector (labelled "index")."""

    def __init__(self, db: Gateway, *, chat_filter: bool = True):
        self._db = db
        self.chat_filter = chat_filter  # the index filters by session_id (lib.storage.schema.filters_by_chat)

    @classmethod
    def open(cls, client: Any, table: str, meter: Meter | None = None) -> VectorStore:
        """The vector store of one table, through its (metered) client."""
        return cls(Gateway(client, table, meter))

    @property
    def db(self) -> Gateway:
        """The gateway its requests go through (for the other stores of the same table)."""
        return self._db

    def put_turn(self, user_id: str, turn: TurnVector) -> None:
        """Put (or replace: the same key on a Retry) one turn's vector item."""
        with self._db.action("index", user_id):
            self._db.call("put_item", Item=turn.item(user_id))

    def delete_turn(self, user_id: str, session_id: str, message_id: str) -> None:
        """Take one turn's vector item out of the index (a turn whose selected version has no answer now: the item
        would still show, and recall would send, the version it was made from)."""
        with self._db.action("index", user_id):
            self._db.call("delete_item", Key=to_item(keys.vector_key(user_id, session_id, message_id)))

    def put_turns(self, user_id: str, turns: Sequence[TurnVector]) -> int:
        """Many at once (reindex, import): BatchWriteItem, 25 a request."""
        with self._db.action("index", user_id):
            return self._db.batch_write(puts=[t.item(user_id) for t in turns])

    def set_memory_vector(self, user_id: str, memory_id: str, text: str, model: str, vector: Sequence[float]) -> bool:
        """Add the vector to a memory whose text is still `text` (an edit in between wins: its vector comes later);
        False when the memory was deleted or changed."""
        with on_condition_failed() as changed, self._db.action("index", user_id):
            # only onto the text this vector was made from, and never onto a deleted memory (no resurrection)
            self._db.call(
                "update_item",
                Key=to_item(keys.memory_key(user_id, memory_id)),
                UpdateExpression="SET embedding = :e, embed_model = :m",
                ConditionExpression="attribute_exists(pk) AND #t = :t",
                ExpressionAttributeNames={"#t": "text"},
                ExpressionAttributeValues=to_item({":e": number_list(vector), ":m": model, ":t": text}),
            )
        return not changed

    def models(self, user_id: str) -> Iterator[tuple[str, str | None]]:
        """(sort key, embed_model) of every vector item of the user (one Query per 1 MB page, vectors included in
        the bill: a Query is billed on whole items; reindex pays it once)."""
        with self._db.action("index", user_id):
            for page in self._db.query_pages(
                KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
                ProjectionExpression="sk, embed_model",
                ExpressionAttributeValues=to_item({":pk": keys.user_pk(user_id), ":p": keys.VECTOR_PREFIX}),
            ):
                for item in page:
                    yield item["sk"]["S"], item.get("embed_model", {}).get("S")

    def search(
        self,
        user_id: str,
        vector: Sequence[float],
        top_k: int,
        *,
        kind: str | None = None,
        session_id: str | None = None,
    ) -> list[Hit]:
        """The user's nearest vector items (of one chat, with `session_id`, where the index can filter by it: an
        index without the filter answers the user's nearest, and the caller keeps the chat's). `user_id` must come
        from the signed-in identity: the index's HASH scopes the search, but IAM cannot (dynamodb:LeadingKeys
        does not apply to SearchVectors)."""
        keys.user_pk(user_id)  # refuses an empty or non-string id
        condition, names, values = "user_id = :u", {}, {":u": user_id}
        if kind:
            condition, names["#k"], values[":k"] = condition + " AND #k = :k", "kind", kind
        if session_id is not None and self.chat_filter:
            condition, names["#s"], values[":s"] = condition + " AND #s = :s", "session_id", session_id
        with self._db.action("search", user_id):
            response = self._db.call(
                "search_vectors",
                IndexName=VECTOR_INDEX,
                SearchVector=to_item({"v": number_list(vector)})["v"]["L"],
                TopK=top_k,
                SearchConditionExpression=condition,
                ExpressionAttributeValues=to_item(values),
                **({"ExpressionAttributeNames": names} if names else {}),
            )
        return [Hit(from_item(r["Item"]), float(r["Score"])) for r in response.get("SearchResults", [])]

    # --- what reindex reads ----------------------------------------------------------------------------------

    def chats(self, user_id: str) -> list[dict[str, Any]]:
        """Every sidebar row of the user (plain values: session_id, title), one Query per 1 MB page."""
        with self._db.action("index", user_id):
            rows = partitions.user_items(self._db, user_id, keys.SESSION_PREFIX, consistent=False)
        return [from_item(row) for row in rows if keys.is_list_sk(row["sk"]["S"])]

    def turns(self, user_id: str, session_id: str) -> list[Message]:
        """Every turn of one chat, oldest first (eventually consistent: reindex runs behind the chats)."""
        with self._db.action("index", user_id):
            return partitions.session_turns(self._db, user_id, session_id, consistent=False)

    def message_counts(self, user_id: str, session_ids: Iterable[str]) -> dict[str, int]:
        """session_id -> message_count of these chats' metas (BatchGetItem, 100 a request, eventually consistent)."""
        with self._db.action("index", user_id):
            metas = self._db.batch_get([keys.meta_key(user_id, s) for s in session_ids], consistent=False)
        return {m["session_id"]["S"]: int(m.get("message_count", {}).get("N", "0")) for m in metas}

    def memories(self, user_id: str) -> list[Memory]:
        """The user's memories, oldest first (the memory store's own read)."""
        from lib.storage.memories import MemoryStore

        return MemoryStore.over(self._db).load(user_id, action="index")[0]

    def memory_models(self, user_id: str) -> dict[str, str]:
        """memory_id -> embed_model of the user's memories that have a vector (one Query, vectors not read)."""
        pk, low, high = keys.memory_range(user_id)
        with self._db.action("index", user_id):
            items = self._db.query_all(
                KeyConditionExpression="pk = :pk AND sk BETWEEN :low AND :high",
                ProjectionExpression="sk, embed_model",
                ExpressionAttributeValues=to_item({":pk": pk, ":low": low, ":high": high}),
            )
        return {
            keys.memory_id_of(i["sk"]["S"]): i["embed_model"]["S"]
            for i in items
            if keys.record_kind(i["sk"]["S"]) == keys.MEMORY and "embed_model" in i
        }
