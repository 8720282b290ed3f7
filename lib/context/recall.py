"""Recall of older turns: the turns most relevant to a question, from what was already read.

`Recall` is the interface; `KeywordRecall` scores turns by BM25 over keyword terms (words, and
character bigrams for CJK text) among the turns this browser session knows: the pages the chat page
loaded, and the older turns semantic recall fetched (lib/context/semantic_recall.py). It reads
nothing itself: recall never Queries a chat's history, so a question costs the same at turn 300 as
at turn 3. Older turns nobody loaded are found through the vector index (1 SearchVectors) or, without
one, are covered by the running summary.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from lib import tokens
from lib.context.relevance import bm25
from lib.storage.records import DONE, Message


@dataclass(frozen=True)
class RecalledTurn:
    message: Message
    score: float
    partial: bool = False  # the message holds only the starts of its question and answer (the index's snippet)


class Recall(Protocol):
    def recall(
        self,
        user_id: str,
        session_id: str,
        question: str,
        k: int,
        *,
        exclude: frozenset[str] = frozenset(),
        room: int | None = None,
        cap: int | None = None,
    ) -> list[RecalledTurn]:
        """At most k turns of the session most relevant to `question`, best first, none of `exclude` (message ids);
        `room`: the tokens the caller can spend on them, `cap`: the most it spends on one (a longer turn is sent as
        an excerpt), so an implementation that reads turns reads what the room can take."""
        ...


def answered(turn: Message) -> bool:
    """A turn that may be sent: a question with its answer (never one without the other)."""
    return turn.status == DONE and bool(turn.output_body)


MAX_POOL_TURNS = 256  # turns a pool keeps; past it the least recently seen go (memory flat in the chat's length)


@dataclass
class TurnPool:
    """The turns of one chat this browser session knows, by id (loaded pages and fetched recall hits), at most
    MAX_POOL_TURNS: a long session in a long chat keeps the turns it last saw, not every turn it ever read."""

    turns: dict[str, Message] = field(default_factory=dict)
    _terms: dict[str, Counter] = field(default_factory=dict, repr=False)
    limit: int = MAX_POOL_TURNS

    def add(self, turns: list[Message]) -> None:
        for turn in turns:
            old = self.turns.pop(turn.message_id, None)
            self.turns[turn.message_id] = turn  # (re)inserted last: the most recently seen
            if old != turn:
                self._terms.pop(turn.message_id, None)
        while len(self.turns) > self.limit:
            gone = next(iter(self.turns))
            del self.turns[gone]
            self._terms.pop(gone, None)

    def ordered(self) -> list[Message]:
        return [self.turns[i] for i in sorted(self.turns)]  # ULIDs sort in creation order

    def terms(self, turn: Message) -> Counter:
        found = self._terms.get(turn.message_id)
        if found is None:  # the question counts twice: what the user said carries the facts they ask about later
            found = Counter(tokens.terms(turn.input_body) * 2 + tokens.terms(turn.output_body))
            self._terms[turn.message_id] = found
        return found


class KeywordRecall:
    """BM25 over a pool's answered turns; a newer turn wins a tie (a fact restated later replaces the old one)."""

    def __init__(self, pools: "PoolSource", k1: float = 1.2, b: float = 0.75):
        self._pools = pools
        self._k1, self._b = k1, b

    def recall(
        self,
        user_id: str,
        session_id: str,
        question: str,
        k: int,
        *,
        exclude: frozenset[str] = frozenset(),
        room: int | None = None,
        cap: int | None = None,
    ) -> list[RecalledTurn]:
        pool = self._pools.pool(user_id, session_id)
        query = set(tokens.terms(question))
        docs = [t for t in pool.ordered() if answered(t) and t.message_id not in exclude]
        if not query or not docs or k <= 0:
            return []
        scores = bm25(query, [pool.terms(t) for t in docs], k1=self._k1, b=self._b)
        scored = [
            RecalledTurn(turn, score * (1 + 0.05 * position / len(docs)))
            for position, (turn, score) in enumerate(zip(docs, scores))
            if score > 0
        ]
        scored.sort(key=lambda r: (-r.score, r.message.message_id))
        return scored[:k]


class PoolSource(Protocol):
    def pool(self, user_id: str, session_id: str) -> TurnPool: ...
