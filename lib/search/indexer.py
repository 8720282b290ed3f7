"""Writing vectors: one vector item per finished turn, one vector per memory, and `reindex` for the rest.

Vectors are written after a turn is saved, never on the path to the first token, and a
failure to embed or write never fails the turn: it is logged (ids only) and `python -m
lib.admin reindex` embeds whatever lacks a vector of the configured model. The same key
per turn makes every write idempotent; a Retry's new answer rewrites its vector.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lib import logs
from lib.errors import ChatError
from lib.search.embedders import Embedder
from lib.storage import keys
from lib.storage.records import DONE, Memory, Message
from lib.storage.vectors import SNIPPET_CHARS, SNIPPET_QUESTION_CHARS, SNIPPET_SEPARATOR, TurnVector, VectorStore

BATCH = 64  # turns embedded and written together by reindex and import


def turn_text(title: str, message: Message) -> str:
    """What a turn's vector stands for: the chat's title, the question, the start of the answer."""
    return f"{title}\n{message.input_body}\n{message.output_body[:1500]}"


def snippet(message: Message) -> str:
    """The bounded text a result shows: the question, then the answer's start."""
    question = " ".join(message.input_body.split())
    answer = " ".join(message.output_body.split())
    return f"{question[:SNIPPET_QUESTION_CHARS]}{SNIPPET_SEPARATOR}{answer}"[:SNIPPET_CHARS]


def turn_vector(title: str, message: Message, model: str, vector: Sequence[float]) -> TurnVector:
    """A turn's vector item: its snippet, where the snippet's question ends, and whether it is the whole turn: not
    for a body kept in the object store (the item holds only its start), nor for text whose line breaks or runs of
    spaces the snippet collapses (code, lists: they carry meaning)."""
    text = snippet(message)
    question = " ".join(message.input_body.split())
    whole = (
        message.input_ref is None
        and message.output_ref is None
        and question == message.input_body.strip()
        and " ".join(message.output_body.split()) == message.output_body.strip()
        and len(question) <= SNIPPET_QUESTION_CHARS
        and len(question) + len(SNIPPET_SEPARATOR) + len(" ".join(message.output_body.split())) <= SNIPPET_CHARS
    )
    cut = min(len(question), SNIPPET_QUESTION_CHARS, len(text))
    return TurnVector(
        message.session_id, message.message_id, title, text, message.create_time, model, vector, cut or None, whole
    )


_CODE = re.compile(r"(`{1,3})(.*?)(?:\1|$)")  # a code span or fence (the snippet may cut it): shown as written
_TABLE_RULE = re.compile(r"\|?(?:\s*:?-{3,}:?\s*\|)+\s*:?-*:?")  # | --- | :-: | (a table's header rule)
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")  # [text](url) and ![alt](url) -> the text
_EMPHASIS = re.compile(r"(?<![\w*_])[*_]{1,3}(?=[^\s*_])|(?<=[^\s*_])[*_]{1,3}(?![\w*_.])")
_HEADING = re.compile(r"(?:(?<=\s)|^)#{1,6}\s+(?=[A-Z0-9])")


def readable_snippet(text: str) -> str:
    """A stored snippet as a result shows it: its Markdown marks (emphasis, code ticks, table rules and pipes,
    heading hashes, link targets) left out, code as written, and, when the snippet was cut at its bound, cut at
    a word with …."""
    cut = len(text) >= SNIPPET_CHARS
    parts = []
    for i, piece in enumerate(_CODE.split(text)):
        if i % 3 == 1:
            continue  # the backticks themselves
        if i % 3 == 2:
            parts.append(piece)  # inside a code span or fence
            continue
        piece = _LINK.sub(r"\1", _TABLE_RULE.sub(" ", piece))
        parts.append(_HEADING.sub("", _EMPHASIS.sub("", piece.replace("|", " "))))
    text = " ".join("".join(parts).split())
    if cut and " " in text:
        text = text.rsplit(" ", 1)[0].rstrip(" ,;:—-") + " …"
    return text


def indexable(message: Message) -> bool:
    return message.status == DONE and bool(message.output_body)


class Indexer:
    """Embeds and writes vectors for one table with one embedder."""

    def __init__(self, db: Any, embedder: Embedder, ledger: Any = None):
        """`db`: the table's VectorStore (or the storage gateway one is made over); `ledger`: lib.usage.ledger.Ledger,
        which counts embedding tokens, priced as the embed model (local: free)."""
        self.vectors = db if isinstance(db, VectorStore) else VectorStore(db)
        self.embedder = embedder
        self.ledger = ledger

    @property
    def db(self) -> Any:
        """The storage gateway under the vector store (for callers that make other stores of the same table)."""
        return self.vectors.db

    def embed(self, user_id: str, texts: Sequence[str], kind: str = "document") -> list[list[float]]:
        embedded = self.embedder.embed(texts, kind)  # type: ignore[arg-type]
        if self.ledger is not None:
            from lib.model.models import Usage

            self.ledger.record_tokens(user_id, self.embedder.model, Usage(input_tokens=embedded.tokens))
        return embedded.vectors

    def turn_vectors(self, user_id: str, title: str, messages: Sequence[Message]) -> list[TurnVector]:
        done = [m for m in messages if indexable(m)]
        if not done:
            return []
        vectors = self.embed(user_id, [turn_text(title, m) for m in done])
        return [turn_vector(title, m, self.embedder.model, v) for m, v in zip(done, vectors)]

    def index_turns(self, user_id: str, title: str, messages: Sequence[Message]) -> int:
        """Embed and write the finished ones of these turns of one chat (BatchWriteItem); returns how many."""
        written = 0
        for start in range(0, len(messages), BATCH):
            turns = self.turn_vectors(user_id, title, messages[start : start + BATCH])
            if turns:
                written += self.vectors.put_turns(user_id, turns)
        return written

    def index_memory(self, user_id: str, memory: Memory) -> bool:
        """Embed one memory onto its own item (conditional on its text: an edit in between wins)."""
        vector = self.embed(user_id, [memory.text])[0]
        return self.vectors.set_memory_vector(user_id, memory.memory_id, memory.text, self.embedder.model, vector)


def index_turn_after_save(indexer: Indexer | None, user_id: str, title: str, message: Message) -> bool:
    """For the chat page, AFTER the answer is saved (never before the first token): the turn's vector item.
    Returns False (logged, ids only) when there is no embedder or it failed: the chat is unaffected, and
    `python -m lib.admin reindex` catches up."""
    if indexer is None or not indexable(message):
        return False
    try:
        turns = indexer.turn_vectors(user_id, title, [message])
        indexer.vectors.put_turn(user_id, turns[0])
        return True
    except ChatError as exc:  # the embedder or DynamoDB could not do it now
        logs.warning(
            "search.index_failed",
            session_id=message.session_id,
            message_id=message.message_id,
            error_class=type(exc).__name__,
        )
        return False


def make_indexer(services: Any) -> Indexer | None:
    """The indexer of a Services (None when CHAT_EMBED_PROVIDER=off)."""
    from lib.search.embedders import make_embedder

    embedder = make_embedder(services.settings)
    if embedder is None:
        return None
    database = services.database
    return Indexer(VectorStore.open(database.client, database.table, database.meter), embedder, services.ledger)


# --- reindex ------------------------------------------------------------------------------------------------------


@dataclass
class ReindexCounts:
    users: int = 0
    sessions: int = 0
    turns: int = 0
    memories: int = 0
    skipped: int = 0  # already had a vector of the configured model


def reindex_user(
    indexer: Indexer, user_id: str, *, everything: bool = False, progress: Callable[[int], None] | None = None
) -> ReindexCounts:
    """Embed every turn and memory of one user that lacks a vector of the configured model (all with
    `everything`). Resumable: what is done has the model's vector and is skipped by the next run."""
    store = indexer.vectors
    counts = ReindexCounts(users=1)
    have = {} if everything else {sk: model for sk, model in store.models(user_id)}
    rows = store.chats(user_id)
    # A chat with a vector of this model for every turn is skipped without reading its turns: its meta's
    # message_count (100 metas per BatchGetItem) against its vector items.
    metas = store.message_counts(user_id, [r["session_id"] for r in rows]) if have else {}
    per_session: dict[str, int] = {}
    for sk, model in have.items():
        if model == indexer.embedder.model and keys.record_kind(sk) == keys.VECTOR:
            try:
                per_session[keys.vector_parts(sk)[0]] = per_session.get(keys.vector_parts(sk)[0], 0) + 1
            except ValueError:
                continue  # a VEC# item of another shape
    for row in rows:
        counts.sessions += 1
        session_id, title = row["session_id"], row.get("title", "")
        done = per_session.get(session_id, 0)
        counts.skipped += done
        if done and done >= metas.get(session_id, -1):
            continue
        todo = [
            m
            for m in store.turns(user_id, session_id)
            if indexable(m)
            and have.get(keys.vector_key(user_id, session_id, m.message_id)["sk"]) != indexer.embedder.model
        ]
        counts.turns += indexer.index_turns(user_id, title, todo)
        if progress:
            progress(len(todo))
    memories = store.memories(user_id)
    models = store.memory_models(user_id) if not everything else {}
    for memory in memories:
        if models.get(memory.memory_id) == indexer.embedder.model:
            counts.skipped += 1
            continue
        counts.memories += int(indexer.index_memory(user_id, memory))
    return counts


# Whether a table has the vector index, per (client, table): (the index's dimensions or None, when asked). A yes
# is kept (an index is not dropped under a running app); a no is asked again after NO_INDEX_RECHECK_S, so an index
# an operator adds (`python -m lib.admin add-vector-index`) is used without a restart.
NO_INDEX_RECHECK_S = 60.0
_SEARCHABLE: dict[tuple[int, str], tuple[int | None, bool, float]] = {}
_clock: Callable[[], float] = time.monotonic
_WRONG_SIZE: set[tuple[int, str]] = set()  # (client, table) whose index was found of another size than the embedder


def _index_state(database: Any) -> tuple[int | None, bool]:
    """The vector index's dimensions (None: no index) and whether it filters by chat, from the cache or one
    DescribeTable. An index without the chat filter (made by an older version) is logged once a process: recall
    still works, over the user's nearest turns, until an operator makes it again."""
    key = (id(database.client), database.table)
    cached = _SEARCHABLE.get(key)
    now = _clock()
    if cached is not None and (cached[0] is not None or now - cached[2] < NO_INDEX_RECHECK_S):
        return cached[0], cached[1]
    from lib.storage.schema import filters_by_chat, vector_index_description

    try:
        index = vector_index_description(database.client, database.table)
    except Exception:  # noqa: BLE001 (DescribeTable refused: keyword recall only until it is asked again)
        logs.warning("search.describe_failed", table=database.table)
        index = None
    dimensions = index.get("Dimensions") if index is not None else None
    by_chat = filters_by_chat(index)
    if index is not None and not by_chat:
        logs.warning("search.index_without_chat_filter", fix="python -m lib.admin add-vector-index --rebuild")
    _SEARCHABLE[key] = (dimensions, by_chat, now)
    return dimensions, by_chat


def searchable_indexer(services: Any) -> Indexer | None:
    """The indexer when the table has the vector index of the embedder's dimensions, else None (one DescribeTable
    per process and table while it has the index; without it, one a minute). A Services' own indexer is reused;
    its searches filter by chat only if the index can."""
    indexer = getattr(services, "indexer", None) or make_indexer(services)
    if indexer is None:
        return None
    dimensions, by_chat = _index_state(services.database)
    indexer.vectors.chat_filter = by_chat
    if dimensions == indexer.embedder.dimensions:
        return indexer
    key = (id(services.database.client), services.database.table)
    if dimensions is not None and key not in _WRONG_SIZE:  # said once a process: keyword-only until made again
        _WRONG_SIZE.add(key)
        logs.warning(
            "search.index_dimensions_differ",
            index=dimensions,
            embedder=indexer.embedder.dimensions,
            fix="python -m lib.admin add-vector-index --rebuild, then reindex",
        )
    return None
