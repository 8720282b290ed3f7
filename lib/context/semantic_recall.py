"""Semantic recall (SearchVectors over the chat's VEC# items) fused with keyword recall by reciprocal rank fusion.

Both return turns of the one chat the question is in. Semantic recall finds them among the user's
nearest turn vectors (1 SearchVectors request per question, TopK up to 100, the user id from the
signed-in identity); the best hits of this chat that the browser session does not hold yet are read
in 1 BatchGetItem (at most k turns, eventually consistent) and join its turn pool, so keyword recall
knows them too from then on. Neither path may delay the first token: the local model's weights load in
the background on first use, and until they are in, recall is keyword only.
"""

from __future__ import annotations

from typing import Any, Callable

from lib import logs
from lib.context.recall import KeywordRecall, PoolSource, Recall, RecalledTurn, answered
from lib.errors import ChatError

RRF_K = 60
Fetch = Callable[[str, str, list], list]  # (user_id, session_id, message ids) -> the turns, 1 BatchGetItem


class SemanticRecall:
    """The chat's turns nearest to the question, from the index, and the hits not yet held read by id."""

    def __init__(self, indexer: Any, pools: PoolSource, fetch: Fetch | None = None):
        self._indexer = indexer
        self._pools = pools
        self._fetch = fetch

    def ready(self) -> bool:
        """False while the local model's weights are still loading (they start loading here, in the background)."""
        return self._indexer.embedder.ready()

    def recall(
        self, user_id: str, session_id: str, question: str, k: int, *, exclude: frozenset[str] = frozenset()
    ) -> list[RecalledTurn]:
        if k <= 0 or not question.strip() or not self.ready():
            return []
        pool = self._pools.pool(user_id, session_id)
        try:
            vector = self._indexer.embedder.embed([question], "query").vectors[0]
            hits = self._indexer.vectors.search(user_id, vector, min(100, 4 * k + 20), kind="turn")
        except ChatError as exc:  # the index or the model cannot answer now: keyword recall still does
            logs.warning("recall.semantic_failed", session_id=session_id, error_class=type(exc).__name__)
            return []
        ranked = [
            (hit.item.get("message_id", ""), hit.score)
            for hit in hits
            if hit.item.get("session_id") == session_id
            and hit.item.get("embed_model") == self._indexer.embedder.model
            and hit.item.get("message_id") not in exclude
        ][:k]
        missing = [m for m, _ in ranked if m not in pool.turns]
        if missing and self._fetch is not None:
            try:
                pool.add(self._fetch(user_id, session_id, missing))
            except ChatError as exc:  # throttled past retries: recall what is held, the question still goes
                logs.warning("recall.fetch_failed", session_id=session_id, error_class=type(exc).__name__)
        out = []
        for message_id, score in ranked:
            turn = pool.turns.get(message_id)
            if turn is not None and answered(turn):
                out.append(RecalledTurn(turn, 2.0 - score))  # COSINE: 0 is identical
        return out


class FusedRecall:
    """Keyword and semantic recall, fused: score = sum over the lists of 1 / (60 + rank)."""

    def __init__(self, *parts: Recall):
        self._parts = parts

    def recall(
        self, user_id: str, session_id: str, question: str, k: int, *, exclude: frozenset[str] = frozenset()
    ) -> list[RecalledTurn]:
        scores: dict[str, float] = {}
        turns: dict[str, Any] = {}
        for part in self._parts:
            for rank, found in enumerate(part.recall(user_id, session_id, question, k, exclude=exclude), 1):
                key = found.message.message_id
                scores[key] = scores.get(key, 0.0) + 1 / (RRF_K + rank)
                turns[key] = found.message
        best = sorted(scores, key=lambda key: (-scores[key], key))[:k]
        return [RecalledTurn(turns[key], scores[key]) for key in best]


def fused_recall(pools: PoolSource, indexer: Any, fetch: Fetch | None = None) -> Recall:
    """Keyword recall alone without an indexer (CHAT_EMBED_PROVIDER=off), else keyword + semantic."""
    keyword = KeywordRecall(pools)
    # semantic first: the hits it reads join the pool, so keyword recall scores them in the same question
    return keyword if indexer is None else FusedRecall(SemanticRecall(indexer, pools, fetch), keyword)
