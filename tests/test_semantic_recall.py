"""Semantic recall fused with keyword recall: the chat's own turns only, found by meaning, no extra item read."""

from __future__ import annotations

from lib.context.cache import ContextCache
from lib.context.recall import KeywordRecall
from lib.context.semantic_recall import HybridRecall
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


def indexer_for(client, table, meter):
    LocalEmbedder._load()
    return Indexer(Gateway(client, table, meter), LocalEmbedder())


def test_hybrid_recall_finds_the_paraphrased_turn_of_this_chat_only(store, client, table, meter, requests):
    indexer = indexer_for(client, table, meter)
    session, turns = chat(store, indexer, "u-1", TURNS)
    other, _ = chat(store, indexer, "u-1", [("My pet kitten eats fish every day.", "Sounds healthy.")])
    chat(store, indexer, "u-2", [("Tell me about my kitten's food", "Tuna.")])
    cache = ContextCache()
    cache.pool("u-1", session.session_id).add(turns)
    requests.reset()
    found = HybridRecall(indexer, cache).recall("u-1", session.session_id, "what does my kitten eat?", 2)
    assert found[0].message.message_id == turns[0].message_id
    assert {r.message.session_id for r in found} == {session.session_id}  # not the other chat, not u-2's
    assert requests.names == ["SearchVectors"]  # no item read: the turns come from the pool
    assert KeywordRecall(cache).recall("u-1", session.session_id, "what does my kitten eat?", 2) == []
    found = HybridRecall(indexer, cache).recall(
        "u-1", session.session_id, "what does my kitten eat?", 2, exclude=frozenset({turns[2].message_id})
    )
    assert turns[2].message_id not in {r.message.message_id for r in found}


def long_chat(store, indexer, user, n, facts):
    """n turns of filler with `facts` ({position: (question, answer)}), each indexed as the page would."""
    return chat(
        store,
        indexer,
        user,
        [
            facts.get(i, (f"Filler question {i} about the weather.", f"Filler answer {i}: " + "cloudy " * 30))
            for i in range(n)
        ],
    )


def test_a_keyword_in_a_snippet_ranks_a_turn_the_session_does_not_hold_and_one_read_brings_it(
    store, client, table, meter, requests
):
    indexer = indexer_for(client, table, meter)
    long_answer = "Noted. " + "The code goes on every invoice line. " * 12  # longer than a snippet holds
    session, turns = long_chat(store, indexer, "u-1", 40, {5: ("The invoice code for Acme is ZX-4471.", long_answer)})
    cache = ContextCache()
    cache.pool("u-1", session.session_id).add(turns[-10:])  # the page holds the newest ten
    requests.reset()
    found = HybridRecall(indexer, cache, fetch_for(client, table, meter)).recall(
        "u-1", session.session_id, "what was the ZX-4471 code for?", 5, room=300
    )
    assert found[0].message.message_id == turns[5].message_id
    assert requests.names == ["SearchVectors", "BatchGetItem"]
    (read,) = [params for name, params in requests.calls if name == "BatchGetItem"]
    assert len(next(iter(read["RequestItems"].values()))["Keys"]) <= 5  # at most k, those not held
    assert turns[5].message_id in cache.pool("u-1", session.session_id).turns  # held from now on
    assert not found[0].partial and found[0].message.output_body == turns[5].output_body


def test_a_turn_its_snippet_holds_whole_is_sent_from_the_snippet_without_a_read(store, client, table, meter, requests):
    indexer = indexer_for(client, table, meter)
    fact = ("The invoice code for Acme is ZX-4471.", "Noted, ZX-4471 for Acme.")
    session, turns = long_chat(store, indexer, "u-1", 40, {5: fact})
    cache = ContextCache()
    cache.pool("u-1", session.session_id).add(turns[-10:])
    requests.reset()
    found = HybridRecall(indexer, cache, fetch_for(client, table, meter)).recall(
        "u-1", session.session_id, "what was the ZX-4471 code for?", 5, room=300
    )
    assert requests.names == ["SearchVectors"]  # the hit's snippet is the whole turn: nothing to read
    best = found[0]
    assert best.message.message_id == turns[5].message_id and not best.partial
    assert (best.message.input_body, best.message.output_body) == fact
    assert best.message.create_time == turns[5].create_time
    assert turns[5].message_id not in cache.pool("u-1", session.session_id).turns  # a snippet is not held as a turn


def test_past_the_turns_read_a_long_hit_is_sent_as_its_snippets_starts_marked_partial(
    store, client, table, meter, requests
):
    from lib.context.semantic_recall import FETCH_MAX

    indexer = indexer_for(client, table, meter)
    long = [
        (f"Filler question {i} about the weather.", f"Filler answer {i}: " + "cloudy and cold " * 30) for i in range(30)
    ]
    session, turns = chat(store, indexer, "u-1", long)  # every answer is longer than its snippet
    requests.reset()
    found = HybridRecall(indexer, ContextCache(), fetch_for(client, table, meter)).recall(
        "u-1", session.session_id, "the weather filler answers?", 20, room=3000
    )
    (read,) = [params for name, params in requests.calls if name == "BatchGetItem"]
    assert len(next(iter(read["RequestItems"].values()))["Keys"]) == FETCH_MAX
    whole = {t.message_id: t for t in turns}
    partial = [r for r in found if r.partial]
    assert len(found) == 20 and len(partial) == 20 - FETCH_MAX
    for r in partial:  # each side is the start of the stored one, the answer cut at the snippet's bound
        turn = whole[r.message.message_id]
        assert turn.input_body.startswith(r.message.input_body)
        assert r.message.output_body.endswith(" …")  # marked cut for the model too
        start = r.message.output_body.removesuffix(" …")
        assert " ".join(turn.output_body.split()).startswith(start)
        assert len(start) < len(" ".join(turn.output_body.split()))
    assert all(whole[r.message.message_id] == r.message for r in found if not r.partial)  # those read: whole


def test_a_month_the_question_names_ranks_the_turns_written_then_first(store, client, table, meter):
    from lib.storage import keys

    indexer = indexer_for(client, table, meter)
    session, months = None, {}
    for month in (3, 7, 11):  # the same words in three months of one chat
        with keys.clock(lambda m=month: keys.parse_time(f"2025-{m:02d}-10T09:00:00.000Z")):
            if session is None:
                session, pending = store.create_session("u-1", "We ran the team offsite.", system_prompt_id="p")
            else:
                session, pending = store.send_message("u-1", session, "We ran the team offsite.", system_prompt_id="p")
        done = store.finish_message(
            "u-1",
            pending,
            output_body="Sounds fun.",
            input_token=1,
            output_token=1,
            response_start_time=pending.create_time,
            response_end_time=pending.create_time,
        )
        index_turn_after_save(indexer, "u-1", session.title, done)
        months[month] = done.message_id
    found = HybridRecall(indexer, ContextCache(), fetch_for(client, table, meter)).recall(
        "u-1", session.session_id, "what did we run in July 2025?", 3
    )
    assert [r.message.message_id for r in found][0] == months[7]


def fetch_for(client, table, meter):
    from lib.storage.summaries import SummaryStore

    return SummaryStore(client, table, meter).turns_by_id


def test_the_engine_uses_hybrid_recall_when_the_index_exists(app_env, monkeypatch):
    from lib.config import Settings
    from lib.web import ui

    svc = ui._services(Settings.load())
    assert isinstance(svc.engine.recall(ContextCache()), HybridRecall)
    monkeypatch.setenv("CHAT_EMBED_PROVIDER", "off")
    off = ui._services(Settings.load())
    assert isinstance(off.engine.recall(ContextCache()), KeywordRecall)
