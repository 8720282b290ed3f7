"""Semantic recall (SearchVectors over the chat's VEC# items) fused with keyword recall by reciprocal rank fusion.

Both return turns of the one chat the question is in; semantic recall finds them among the
user's nearest turn vectors (1 SearchVectors request per question, TopK up to 100, the user
id from the signed-in identity) and keeps the ones of this chat that the browser session's
turn pool holds (lib/context/recall.py: the turns the page loaded and up to 2 older pages),
so it adds no item read. Neither path may delay the first token: the local model's weights
load in the background on first use, and until they are in, recall is keyword only.
"""

from __future__ import annotations

from typing import Any

from lib import logs
from lib.context.recall import KeywordRecall, PoolSource, Recall, RecalledTurn, answered
from lib.errors import ChatError

RRF_K = 60


class SemanticRecall:
    """The chat's turns nearest to the question, from the index (no other read)."""

    def __init__(self, indexer: Any, pools: PoolSource):
        self._indexer = indexer
        self._pools = pools

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
        out = []
        for hit in hits:
            item = hit.item
            turn = pool.turns.get(item.get("message_id", ""))
            if (
                item.get("session_id") != session_id
                or item.get("embed_model") != self._indexer.embedder.model
                or turn is None
                or turn.message_id in exclude
                or not answered(turn)
            ):
                continue
            out.append(RecalledTurn(turn, 2.0 - hit.score))  # COSINE: 0 is identical
            if len(out) == k:
                break
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


def fused_recall(pools: PoolSource, indexer: Any) -> Recall:
    """Keyword recall alone without an indexer (CHAT_EMBED_PROVIDER=off), else keyword + semantic."""
    keyword = KeywordRecall(pools)
    return keyword if indexer is None else FusedRecall(keyword, SemanticRecall(indexer, pools))
