"""Token counts and keyword terms, the same for every language the team writes in.

Counts are estimates (no tokenizer ships offline): about four characters per token for
alphabetic text, one token per CJK character (Claude's tokenizers spend at least that
on Chinese and Japanese, so four-per-token would undercount them fourfold and a
budget would be passed). Terms are lower-cased words, plus character bigrams for CJK
text, which has no spaces to split on.
"""

from __future__ import annotations

import functools
import re

# CJK ideographs, kana and hangul: one token each.
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_WORD = re.compile(r"[a-z0-9][a-z0-9_'.:-]*[a-z0-9]|[a-z0-9]")
_VOWEL = re.compile(r"[aeiou]")
_CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")

STOPWORDS = frozenset(
    """a an and are as at be been but by can could did do does for from had has have how i if in
into is it its me my of on or our so that the their them then there these they this to us was we were what when where
which who why will with would you your about again also any just like more most not now only other should some such
than too very tell remind said say know think please okay ok yes no hi hello thanks thank did didn't don't what's
i'm i've we've let's one two get got make made use used""".split()
)


def count(text: str) -> int:
    """Estimated tokens of `text` (at least 1): CJK characters one each, other characters four to a token."""
    cjk = len(_CJK.findall(text))
    return max(1, cjk + (len(text) - cjk + 3) // 4)


def _stem(word: str) -> str:
    """A light stemmer (the first step of Porter's, shortened): enough for deploy/deploys/deployed, move/moved/moving
    and party/parties to meet, never enough to merge unrelated words."""
    if word.endswith("'s"):
        word = word[:-2]
    if len(word) > 4 and word.endswith("sses"):
        word = word[:-2]
    elif len(word) > 4 and word.endswith("ies"):
        word = word[:-2]
    elif len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        stem = word[: -len(suffix)]
        if word.endswith(suffix) and len(stem) >= 3 and _VOWEL.search(stem):
            word = stem[:-1] if len(stem) > 3 and stem[-1] == stem[-2] and stem[-1] not in "lsz" else stem
            break
    if len(word) > 3 and word[-1] in "ey":
        word = word[:-1] + ("i" if word[-1] == "y" else "")
    return word


CACHED_CHARS = 4000  # texts up to this long keep their terms (recall scores the same snippets question after question)


def terms(text: str) -> list[str]:
    """Keyword terms: see `_terms`; a short text's are kept (at most 8,192 texts of CACHED_CHARS, a few MB)."""
    return list(_cached_terms(text) if len(text) <= CACHED_CHARS else _terms(text))


def _terms(text: str) -> tuple[str, ...]:
    """Keyword terms: stemmed lower-case words without stopwords (numbers kept, "4 years" has a 4), and CJK character
    bigrams (single characters for a one-character run)."""
    lowered = text.lower()
    found = [
        _stem(w.strip("'.:-")) for w in _WORD.findall(lowered) if w not in STOPWORDS and (len(w) > 1 or w.isdigit())
    ]
    for run in _CJK_RUN.findall(lowered):
        found += [run[i : i + 2] for i in range(len(run) - 1)] if len(run) > 1 else [run]
    return tuple(t for t in found if t)


_cached_terms = functools.lru_cache(maxsize=8192)(_terms)


def clip(text: str, budget: int) -> str:
    """`text` cut to about `budget` tokens at a word (or character, for CJK) boundary, marked with an ellipsis."""
    if count(text) <= budget:
        return text
    low, high = 0, len(text)
    while low < high:  # the longest prefix within budget
        mid = (low + high + 1) // 2
        if count(text[:mid] + " …") <= budget:
            low = mid
        else:
            high = mid - 1
    cut = text[:low]
    if " " in cut[-40:]:
        cut = cut.rsplit(" ", 1)[0]
    return cut + " …"
