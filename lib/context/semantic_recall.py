"""Hybrid recall: the vector index's candidates ranked by meaning and by keywords together, read as the room needs.

One SearchVectors per question (TopK 100 over the turn vectors of this chat, the user id from the signed-in
identity and the chat as the index's inline filter, so a person's other chats take none of the hundred) gives
the candidates, each with its snippet (the question's and the answer's
start, up to 400 characters) and time, which the request returns anyway. The turns this browser session
holds (the loaded pages, hits read before) join them with their whole text. Every candidate is ranked twice,
by the index's distance and by BM25 of the question's terms over its text (the snippet, or the whole turn
when held), and the two ranks are fused (reciprocal rank fusion, k = 10); a candidate written in a month or
year the question names, or in the same sitting as one of the three best, ranks higher (the evidence is
often the neighbour of what matched best). Then the best candidates, as many as the caller's token room
can take (estimated from their snippets), are made turns: a hit whose snippet holds the whole turn is sent
from it (no read); of the others the session does not hold, the best FETCH_MAX are read in 1 BatchGetItem
(eventually consistent: at most 4 RRU for turns under 4 KB), and the rest are sent as their snippet's two
starts, marked as cut. All are ranked again by keywords over the text now known.

So a question reads what it can send, never the chat's history: the same requests at turn 300 as at turn 3.
Neither path may delay the first token: the local model's weights load in the background on first use, and
until they are in, recall is keyword recall over the turns held.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from lib import logs, tokens
from lib.context.recall import KeywordRecall, PoolSource, Recall, RecalledTurn, answered
from lib.context.relevance import bm25, dates_named, in_dates, ranks
from lib.errors import ChatError
from lib.storage.records import DONE, Message
from lib.storage.vectors import snippet_turn

RRF_K = 10  # flatter than the usual 60: a turn first in one order and absent from the other still ranks high
TOP_K = 100  # SearchVectors' most
FETCH_MAX = 8  # turns read per question at most: 1 BatchGetItem of at most 4 RRU (8 turns under 4 KB)
SITTING_S = 30 * 60  # turns this close in time to one of the best are its neighbours
NEIGHBOUR_BOOST = 0.3
DATE_BOOST = 0.5
FETCH_SLACK = 1.25  # read a quarter more than the room's estimate: a turn sent as an excerpt costs less
TURN_OVERHEAD = 12  # tokens of a recalled turn's date and role labels
Fetch = Callable[[str, str, list], list]  # (user_id, session_id, message ids) -> the turns, 1 BatchGetItem


@dataclass
class _Candidate:
    message_id: str
    time: str
    text: str  # the whole turn when held, else the index's snippet
    held: bool
    semantic: int | None = None  # rank by the index's distance (1 = nearest)
    score: float = 0.0
    snippet: Message | None = None  # the turn as its snippet tells it (None: the item does not say how)
    whole: bool = False  # ... and that is the whole turn


class HybridRecall:
    """Candidates from one SearchVectors and the session's pool, ranked by meaning and keywords; the best not held
    read in one BatchGetItem, as many as the room needs."""

    def __init__(self, indexer: Any, pools: PoolSource, fetch: Fetch | None = None):
        self._indexer = indexer
        self._pools = pools
        self._fetch = fetch

    def ready(self) -> bool:
        """False while the local model's weights are still loading (they start loading here, in the background)."""
        return self._indexer.embedder.ready()

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
        if k <= 0 or not question.strip():
            return []
        if not self.ready():
            return KeywordRecall(self._pools).recall(user_id, session_id, question, k, exclude=exclude)
        pool = self._pools.pool(user_id, session_id)
        candidates = self._candidates(user_id, session_id, question, pool, exclude)
        if not candidates:
            return []
        query = set(tokens.terms(question))
        self._rank(candidates, query, dates_named(question))
        chosen, spent = [], 0
        for candidate in sorted(candidates.values(), key=lambda c: (-c.score, c.message_id)):
            if len(chosen) >= k or (room is not None and spent >= room * FETCH_SLACK):
                break
            chosen.append(candidate)
            need = tokens.count(candidate.text)
            spent += (need if cap is None else min(need, cap)) + TURN_OVERHEAD
        missing = [c.message_id for c in chosen if not c.held and not c.whole][:FETCH_MAX]
        read = set()  # asked for and answered: a turn not returned is gone, not sent from its snippet
        if missing and self._fetch is not None:
            try:
                pool.add(self._fetch(user_id, session_id, missing))
                read = set(missing)
            except ChatError as exc:  # throttled past retries: recall what is held or told, the question still goes
                logs.warning("recall.fetch_failed", session_id=session_id, error_class=type(exc).__name__)
        # message id -> the turn, and whether it is only its snippet's starts
        found: dict[str, tuple[Message, bool]] = {}
        for c in chosen:
            turn = pool.turns.get(c.message_id)
            if turn is not None and answered(turn):
                found[c.message_id] = (turn, False)
            elif turn is None and c.snippet is not None and c.message_id not in read:  # not held: what its snippet says
                found[c.message_id] = (c.snippet, not c.whole)
        again = {c.message_id: c for c in chosen if c.message_id in found}
        for c in again.values():  # the text now known: keywords ranked again over it
            c.text, c.held = _text(found[c.message_id][0]), True
        self._rank(again, query, dates_named(question))
        order = sorted(again.values(), key=lambda c: (-c.score, c.message_id))
        return [RecalledTurn(found[c.message_id][0], c.score, partial=found[c.message_id][1]) for c in order]

    def _candidates(
        self, user_id: str, session_id: str, question: str, pool: Any, exclude: frozenset[str]
    ) -> dict[str, _Candidate]:
        out: dict[str, _Candidate] = {}
        try:
            vector = self._indexer.embedder.embed([question], "query").vectors[0]
            hits = self._indexer.vectors.search(user_id, vector, TOP_K, kind="turn", session_id=session_id)
        except ChatError as exc:  # the index or the model cannot answer now: keyword recall over the pool still does
            logs.warning("recall.semantic_failed", session_id=session_id, error_class=type(exc).__name__)
            hits = []
        rank = 0
        for hit in hits:
            item = hit.item
            message_id = item.get("message_id", "")
            if (
                item.get("session_id") != session_id
                or item.get("embed_model") != self._indexer.embedder.model
                or message_id in exclude
                or message_id in out
            ):
                continue
            rank += 1
            held = pool.turns.get(message_id)
            if held is not None and not answered(held):
                continue  # a Retry in progress: the index still has the old answer's snippet
            text = _text(held) if held is not None else str(item.get("snippet", ""))
            candidate = _Candidate(message_id, str(item.get("create_time", "")), text, held is not None, rank)
            told = snippet_turn(item)
            if held is None and told is not None:
                question_start, answer_start, candidate.whole = told
                candidate.snippet = Message(
                    message_id, session_id, candidate.time, question_start, "", DONE, answer_start
                )
            out[message_id] = candidate
        for turn in pool.ordered():  # the turns held: keyword candidates with their whole text
            if turn.message_id not in out and turn.message_id not in exclude and answered(turn):
                out[turn.message_id] = _Candidate(turn.message_id, turn.create_time, _text(turn), True)
        return out

    @staticmethod
    def _rank(candidates: dict[str, _Candidate], query: set[str], dates: set[str]) -> None:
        """Each candidate's fused score: meaning and keyword ranks, then the boosts of a named date and a sitting."""
        listed = list(candidates.values())
        keyword = ranks(bm25(query, [Counter(tokens.terms(c.text)) for c in listed]))
        semantic = sorted((c for c in listed if c.semantic is not None), key=lambda c: c.semantic)
        for position, c in enumerate(semantic, 1):
            c.semantic = position  # renumbered among these candidates
        for i, c in enumerate(listed):
            c.score = (1 / (RRF_K + c.semantic) if c.semantic else 0.0) + (
                1 / (RRF_K + keyword[i]) if i in keyword else 0.0
            )
            if dates and in_dates(c.time, dates):
                c.score *= 1 + DATE_BOOST
        best = sorted(listed, key=lambda c: (-c.score, c.message_id))[:3]
        sittings = [t for t in (_seconds(c.time) for c in best) if t is not None]
        for c in listed:
            at = _seconds(c.time) if sittings and c not in best else None
            if at is not None and any(abs(at - t) <= SITTING_S for t in sittings):
                c.score *= 1 + NEIGHBOUR_BOOST


def _text(turn: Any) -> str:
    return f"{turn.input_body}\n{turn.output_body}"


def _seconds(time: str) -> float | None:
    try:
        return dt.datetime.fromisoformat(time[:19]).timestamp()
    except ValueError:  # an item of another shape: no sitting
        return None


def fused_recall(pools: PoolSource, indexer: Any, fetch: Fetch | None = None) -> Recall:
    """Keyword recall alone without an indexer (CHAT_EMBED_PROVIDER=off), else hybrid recall over the index."""
    return KeywordRecall(pools) if indexer is None else HybridRecall(indexer, pools, fetch)
