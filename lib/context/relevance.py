"""How relevant a piece of text is to a question, offline: BM25 over keyword terms, the dates a question names,
and query-focused excerpts (the sentences that hold the question's words, not the first ones).

Used by recall (lib/context/recall.py, lib/context/semantic_recall.py), the loader's excerpts of long turns and
its choice of memories (lib/context/loader.py), and search (lib/search/hybrid.py). No reads, no model.
"""

from __future__ import annotations

import calendar
import datetime as dt
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence

from lib import tokens

K1, B = 1.2, 0.75


def bm25(query: set[str], bags: Sequence[Counter], *, k1: float = K1, b: float = B) -> list[float]:
    """The BM25 score of each bag of terms for the query's terms, IDF taken over these bags (0: no term shared)."""
    if not query or not bags:
        return [0.0] * len(bags)
    average = sum(sum(bag.values()) for bag in bags) / len(bags) or 1.0
    frequency = Counter(term for bag in bags for term in query if term in bag)
    scores = []
    for bag in bags:
        length, score = sum(bag.values()), 0.0
        for term in query:
            tf = bag.get(term, 0)
            if tf:
                idf = math.log(1 + (len(bags) - frequency[term] + 0.5) / (frequency[term] + 0.5))
                score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / average))
        scores.append(score)
    return scores


def ranks(scores: Sequence[float]) -> dict[int, int]:
    """index -> rank (1 = best) of the positive scores; ties keep the earlier index first."""
    order = sorted((i for i, s in enumerate(scores) if s > 0), key=lambda i: (-scores[i], i))
    return {i: rank for rank, i in enumerate(order, 1)}


# --- dates a question names -----------------------------------------------------------------------------------

_MONTHS = {name.lower(): n for n, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): n for n, name in enumerate(calendar.month_abbr) if name})
_MONTH_YEAR = re.compile(r"\b(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?,?\s+(\d{4})\b", re.I)
_YEAR = re.compile(r"\b(19[5-9]\d|20\d\d)\b")
_ISO_MONTH = re.compile(r"\b(\d{4})-(\d{2})\b")


def dates_named(question: str) -> set[str]:
    """Key-time prefixes of the months and years a question names ("in October 2023" -> "2023-10", "in 2022" ->
    "2022"): a turn written then is more likely what is asked about (a fact said later about them is not excluded)."""
    found: set[str] = set()
    for month, year in _MONTH_YEAR.findall(question):
        found.add(f"{year}-{_MONTHS[month.lower()]:02d}")
    for year, month in _ISO_MONTH.findall(question):
        if 1 <= int(month) <= 12:
            found.add(f"{year}-{month}")
    years = {y for y in _YEAR.findall(question)}
    found |= {y for y in years if not any(f.startswith(y + "-") for f in found)}
    return found


def in_dates(create_time: str, prefixes: set[str], *, slack_days: int = 31) -> bool:
    """Whether a turn's time falls in one of the named months or years, or up to `slack_days` after (a thing done
    in October is often told in November)."""
    if not prefixes:
        return False
    if any(create_time.startswith(p) for p in prefixes):
        return True
    try:
        earlier = (dt.datetime.fromisoformat(create_time[:10]) - dt.timedelta(days=slack_days)).date().isoformat()
    except ValueError:
        return False
    return any(earlier.startswith(p) for p in prefixes)


# --- excerpts -------------------------------------------------------------------------------------------------

_SENTENCE = re.compile(r"[^.!?。！？\n]+(?:[.!?。！？]+|\n+|$)")
GAP = " … "


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.findall(text) if s.strip()]


def weights(query: set[str], bags: Sequence[Counter]) -> dict[str, float]:
    """Each query term's IDF over these bags (a name every turn holds weighs little, a rare word much)."""
    return {
        term: math.log(1 + (len(bags) - n + 0.5) / (n + 0.5))
        for term in query
        for n in [sum(1 for bag in bags if term in bag)]
    }


def distinctive(query: set[str], bags: Sequence[set[str] | Counter], share: float = 0.3) -> set[str]:
    """The query's terms that set some of these texts apart: held by at most `share` of them (a name that every line
    of a chat holds says nothing about which line is relevant)."""
    most = max(1, int(share * len(bags)))
    return {term for term in query if sum(1 for bag in bags if term in bag) <= most}


def excerpt(text: str, query: Mapping[str, float] | set[str], budget: int, *, opening: int = 8) -> tuple[str, bool]:
    """`text` within about `budget` tokens: whole if it fits, else its opening words (who or what it is about),
    the sentences holding the query's weightiest terms and the sentence after each (it often says the rest), in
    their order, gaps marked with …; with no sentence matching, its leading words. (text, whether it was cut)."""
    if tokens.count(text) <= budget:
        return text, False
    parts = sentences(text)
    weight = query if isinstance(query, Mapping) else dict.fromkeys(query, 1.0)
    matches = [sum(weight.get(t, 0.0) for t in set(tokens.terms(p))) for p in parts]
    if len(parts) <= 1 or not any(matches[1:]):
        return tokens.clip(text, budget), True
    head = parts[0] if tokens.count(parts[0]) <= opening else tokens.clip(parts[0], opening)
    best = [i for i in sorted(range(len(parts)), key=lambda i: (-matches[i], i)) if matches[i] > 0]
    wanted: list[int] = []  # in priority order: the matches, then what follows each
    for i in best + [i + 1 for i in best]:
        if i < len(parts) and i not in wanted:
            wanted.append(i)
    chosen: list[int] = []
    for i in wanted:
        trial = _joined(parts, head, chosen + [i])
        if tokens.count(trial) <= budget:
            chosen.append(i)
    if not set(chosen) - {0}:
        return tokens.clip(text, budget), True
    return _joined(parts, head, chosen), True


def _joined(parts: list[str], head: str, chosen: list[int]) -> str:
    shown = {0: head, **{i: parts[i] for i in chosen}}
    pieces, last = [], -1
    for i in sorted(shown):
        if last >= 0:
            pieces.append(" " if i == last + 1 and not pieces[-1].endswith("…") else GAP)
        pieces.append(shown[i])
        last = i
    if last < len(parts) - 1:
        pieces.append(" …")
    return "".join(pieces)
