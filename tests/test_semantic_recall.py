"""Semantic recall fused with keyword recall: the chat's own turns only, found by meaning, no extra item read."""

from __future__ import annotations

from lib.context.cache import ContextCache
from lib.context.recall import KeywordRecall
from lib.context.semantic_recall import FusedRecall, SemanticRecall
from lib.search.embedders import LocalEmbedder
from lib.search.indexer import Indexer, index_turn_after_save
from lib.storage.gateway import Gateway

TURNS = [
    ("My cat is called Miso and she loves tuna.", "Noted: Miso likes tuna."),
    ("Our quarterly revenue target is four million.", "Understood, four million this quarter."),
    ("The production cluster runs in Frankfurt.", "Got it: production is in eu-central-1."),
]


def chat(store, indexer, user: str, turns):
    session = None
    out = []
    for question, answer in turns:
        if session is None:
            session, pending = store.create_session(user, question, system_prompt_id="p")
        else:
            session, pending = store.send_message(user, session, question, system_prompt_id="p")
        done = store.finish_message(
            user,
            pending,
            output_body=answer,
            input_token=1,
            output_token=1,
            response_start_time=pending.create_time,
            response_end_time=pending.create_time,
        )
        index_turn_after_save(indexer, user, session.title, done)
        out.append(done)
    return session, out


def test_semantic_recall_finds_the_paraphrased_turn_of_this_chat_only(store, client, table, meter, requests):
    LocalEmbedder._load()
    indexer = Indexer(Gateway(client, table, meter), LocalEmbedder())
    session, turns = chat(store, indexer, "u-1", TURNS)
    other, _ = chat(store, indexer, "u-1", [("My pet kitten eats fish every day.", "Sounds healthy.")])
    chat(store, indexer, "u-2", [("Tell me about my kitten's food", "Tuna.")])
    cache = ContextCache()
    cache.pool("u-1", session.session_id).add(turns)
    requests.reset()
    found = SemanticRecall(indexer, cache).recall("u-1", session.session_id, "what does my kitten eat?", 2)
    assert found[0].message.message_id == turns[0].message_id
    assert {r.message.session_id for r in found} == {session.session_id}
    assert requests.names == ["SearchVectors"]  # no item read: the turns come from the pool
    assert KeywordRecall(cache).recall("u-1", session.session_id, "what does my kitten eat?", 2) == []
    fused = FusedRecall(KeywordRecall(cache), SemanticRecall(indexer, cache)).recall(
        "u-1", session.session_id, "what does my kitten eat?", 2, exclude=frozenset({turns[2].message_id})
    )
    assert fused[0].message.message_id == turns[0].message_id
    assert turns[2].message_id not in {r.message.message_id for r in fused}


def test_the_engine_fuses_semantic_recall_when_the_index_exists(app_env, monkeypatch):
    from lib.config import Settings
    from lib.web import ui

    svc = ui._services(Settings.load())
    assert isinstance(svc.engine.recall(ContextCache()), FusedRecall)
    monkeypatch.setenv("CHAT_EMBED_PROVIDER", "off")
    off = ui._services(Settings.load())
    assert isinstance(off.engine.recall(ContextCache()), KeywordRecall)
