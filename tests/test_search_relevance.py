"""Search's relevance cut: a result that shares none of the query's words and is far in meaning is left out, so
nonsense finds nothing instead of twenty unrelated turns; a word match is always kept."""

import pytest

from lib.search.hybrid import search_chats, words_found
from lib.search.indexer import index_turn_after_save
from tests.test_search import FACTS, finished_chat, indexer  # noqa: F401 (the fixture)


@pytest.fixture
def corpus(store, indexer):  # noqa: F811
    for question, answer in FACTS:
        session, message = finished_chat(store, "u-1", question, answer)
        index_turn_after_save(indexer, "u-1", session.title, message)
    return indexer


def found(indexer, query, **options):
    return [r.snippet[:30] for r in search_chats(indexer.vectors, indexer.embedder, "u-1", query, **options).results]


class TestRelevanceCut:
    @pytest.mark.parametrize("query", ["zzqx", "zzqxv kumquat submarine", "quarterly revenue forecast"])
    def test_nonsense_finds_nothing_on_the_search_page(self, corpus, query):
        assert len(found(corpus, query)) == 3  # ranked, all of them, when asked for everything (bench, commands)
        assert found(corpus, query, relevant_only=True) == []

    def test_a_close_meaning_without_a_shared_word_is_kept(self, corpus):
        assert found(corpus, "sourdough starter", relevant_only=True)[0].startswith("What is a good recipe")

    def test_a_shared_word_is_kept_however_far_the_meaning(self, corpus):
        assert found(corpus, "staging", relevant_only=True)[0].startswith("How do I deploy")


def test_words_found_counts_the_query_words_a_text_holds_as_the_page_bolds_them():
    assert words_found("Rotate the database password monthly", "rotate kumquat password") == (2, 3)
    assert words_found("nothing here", "the rotate") == (0, 1)  # stopwords are not the query's words
    assert words_found("Passwords rotated", "password rotate") == (2, 2)  # a word's start, as bolded
