"""Search your chats: semantic results (SearchVectors) fused with keyword matches by reciprocal rank fusion.

One SearchVectors call (TopK 100, kind "turn", the signed-in user's id) returns the nearest
turns; the keyword path ranks those same candidates by BM25 over their title and snippet
(words, and character bigrams for CJK, lib/tokens.py), and RRF (score = sum of
1 / (60 + rank)) fuses the two orders. The keyword path costs no extra read, and it rescues
what the local model ranks low (CJK text, rare names) as long as it is among the 100
nearest: a whole-history keyword index would be a Query over every turn per search.

A search never mixes models: results whose `embed_model` is not the configured one are
left out (and counted, so the page can say to run `reindex`).

SearchVectors always returns the nearest turns, however far: asked with `relevant_only` (the Search page), a result
that shares none of the query's words is kept only within UNMATCHED_MAX_DISTANCE of it, a bound measured per
embedding model (a model not in the table is not cut), so nonsense finds nothing instead of twenty unrelated turns.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

from lib import tokens
from lib.search.embedders import Embedder
from lib.storage.vectors import TURN, VectorStore

CANDIDATES = 100  # SearchVectors' TopK: DynamoDB's most
RRF_K = 60
KEYWORD_COVER = 0.5  # a keyword match holds at least this share of the query's terms (one shared word is noise)
MAX_QUERY_CHARS = 500
MIN_QUERY_CHARS = 2
# COSINE distance past which a result without a keyword match is noise, per embedding model. Local wordllama, on
# the demo history: nonsense and unrelated queries ("zzqx", "banana", "quarterly revenue forecast") are all at 0.82
# or more, a meaning match without a shared word ("pagination" for "How do I paginate a DynamoDB Query?") at 0.78.
# Local MiniLM, on the demo's questions: the same nonsense and unrelated queries at 0.70 or more, "pagination" at 0.45.
UNMATCHED_MAX_DISTANCE = {"wordllama-l2_supercat-256": 0.8, "all-MiniLM-L6-v2": 0.6}


@dataclass(frozen=True)
class Result:
    session_id: str
    message_id: str
    title: str
    snippet: str
    create_time: str
    score: float  # the fused RRF score (higher is better)
    distance: float | None  # COSINE score of the semantic path (0 = identical), None if only a keyword match
    keyword_rank: int | None

    def as_json(self) -> dict:
        return {
            "session_id": self.session_id,
            "message_id": self.message_id,
            "title": self.title,
            "snippet": self.snippet,
            "score": round(self.score, 6),
        }


@dataclass
class Outcome:
    query: str  # as searched (trimmed, cut to MAX_QUERY_CHARS)
    results: list[Result] = field(default_factory=list)
    note: str | None = None  # what the page says instead of, or beside, results
    other_model: int = 0  # candidates left out: embedded by another model (reindex)


def clean_query(text: str) -> tuple[str, str | None]:
    """The query as searched and a note: whitespace collapsed, control characters dropped, long ones cut."""
    text = "".join(ch for ch in str(text) if ch.isprintable() or ch == " ")
    text = " ".join(text.split())
    if len(text) > MAX_QUERY_CHARS:
        return text[:MAX_QUERY_CHARS], f"Only the first {MAX_QUERY_CHARS} characters of the query were searched."
    return text, None


def search_chats(
    vectors: VectorStore,
    embedder: Embedder | None,
    user_id: str,
    query: str,
    top: int = 10,
    *,
    relevant_only: bool = False,
) -> Outcome:
    """The user's turns best matching `query`, best first; with `relevant_only`, without those that share no word
    and are far in meaning (UNMATCHED_MAX_DISTANCE). `user_id` is the signed-in identity's, never a parameter a
    browser can set."""
    text, note = clean_query(query)
    outcome = Outcome(text, note=note)
    if len(text) < MIN_QUERY_CHARS:
        outcome.note = "Type at least two characters to search your chats."
        return outcome
    if embedder is None:
        outcome.note = "Search is off on this server (CHAT_EMBED_PROVIDER=off)."
        return outcome
    vector = embedder.embed([text], "query").vectors[0]
    hits = vectors.search(user_id, vector, CANDIDATES, kind=TURN)
    same = [h for h in hits if h.item.get("embed_model") == embedder.model and h.item.get("user_id") == user_id]
    outcome.other_model = sum(1 for h in hits if h.item.get("embed_model") != embedder.model)
    keyword = _keyword_ranks(text, [f"{h.item.get('title', '')} {h.item.get('snippet', '')}" for h in same])
    fused = []
    for rank, hit in enumerate(same, 1):
        k_rank = keyword.get(rank - 1)
        score = 1 / (RRF_K + rank) + (1 / (RRF_K + k_rank) if k_rank else 0.0)
        item = hit.item
        fused.append(
            Result(
                item.get("session_id", ""),
                item.get("message_id", ""),
                item.get("title", ""),
                item.get("snippet", ""),
                item.get("create_time", ""),
                score,
                hit.score,
                k_rank,
            )
        )
    bound = UNMATCHED_MAX_DISTANCE.get(embedder.model) if relevant_only else None
    if bound is not None:
        fused = [r for r in fused if r.keyword_rank is not None or (r.distance is not None and r.distance <= bound)]
    fused.sort(key=lambda r: -r.score)
    outcome.results = fused[:top]
    if not outcome.results and not outcome.note:
        outcome.note = "No chats match yet." if not hits else None
    return outcome


def _keyword_ranks(query: str, docs: list[str]) -> dict[int, int]:
    """doc index -> keyword rank (1 = best) by BM25, for the docs holding at least KEYWORD_COVER of the query's
    terms: with RRF's flat ranks, a candidate sharing one common word would otherwise jump over better ones
    (measured by bench/search.py: recall@10 0.77 with any shared term, 0.90 with half of them)."""
    query_terms = set(tokens.terms(query))
    if not query_terms or not docs:
        return {}
    bags = [Counter(tokens.terms(d)) for d in docs]
    average = sum(sum(b.values()) for b in bags) / len(bags) or 1.0
    frequency = Counter(t for b in bags for t in query_terms if t in b)
    scores = []
    for i, bag in enumerate(bags):
        length, score = sum(bag.values()), 0.0
        for term in query_terms:
            tf = bag.get(term, 0)
            if tf:
                idf = math.log(1 + (len(docs) - frequency[term] + 0.5) / (frequency[term] + 0.5))
                score += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / average))
        if score > 0 and sum(1 for t in query_terms if t in bag) >= KEYWORD_COVER * len(query_terms):
            scores.append((score, i))
    scores.sort(key=lambda s: (-s[0], s[1]))
    return {i: rank for rank, (_, i) in enumerate(scores, 1)}


def words_found(text: str, query: str) -> tuple[int, int]:
    """(how many of the query's words `text` holds, how many words the query has), as `highlight` finds them."""
    words = _words(query)
    lowered = text.lower()
    held = sum(1 for w in words if re.search(r"\b" + re.escape(w), lowered))
    cjk = "".join(ch for ch in query if _CJK.match(ch))
    pairs = {cjk[i : i + 2] for i in range(len(cjk) - 1)}
    return held + sum(1 for p in pairs if p in text), len(words) + len(pairs)


def _words(query: str) -> set[str]:
    """The query's words that count: no CJK (matched as character pairs), no one-letter words, no stopwords."""
    return {
        w for w in re.findall(r"\w+", query.lower()) if not _CJK.search(w) and len(w) > 1 and w not in tokens.STOPWORDS
    }


_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def highlight(text: str, query: str) -> list[tuple[str, bool]]:
    """`text` as (segment, matched) pairs: the query's words (whole words, any case) and CJK runs of 2+ characters
    found in it. Plain data: the page escapes every segment before it bolds one."""
    words = _words(query)
    patterns = [r"\b" + re.escape(w) + r"\w*" for w in sorted(words, key=len, reverse=True)]
    cjk = "".join(ch for ch in query if _CJK.match(ch))
    patterns += [re.escape(cjk[i : i + 2]) for i in range(len(cjk) - 1)]
    if not patterns:
        return [(text, False)] if text else []
    found = re.compile("|".join(patterns), re.IGNORECASE)
    out: list[tuple[str, bool]] = []
    at = 0
    for match in found.finditer(text):
        if match.start() > at:
            out.append((text[at : match.start()], False))
        if out and out[-1][1]:
            out[-1] = (out[-1][0] + match.group(), True)
        else:
            out.append((match.group(), True))
        at = match.end()
    if at < len(text):
        out.append((text[at:], False))
    return out
