"""Recall searches the vector index for this chat's turns (the index's `session_id` inline filter), so a person's
other chats cannot take the hundred places of a search; an index made before the filter still answers (the
chat's hits kept from the user's nearest) and is made again by the local backend at start or by
`admin add-vector-index --rebuild` on AWS."""

from __future__ import annotations

import uuid

import pytest

from lib.admin import main
from lib.context.cache import ContextCache
from lib.context.semantic_recall import TOP_K, HybridRecall
from lib.database import local_client
from lib.storage.schema import (
    KIND_ATTRIBUTE,
    USER_ATTRIBUTE,
    VECTOR_ATTRIBUTE,
    filters_by_chat,
    vector_index_description,
)
from tests.test_semantic_recall import chat, indexer_for

FACT = ("My cat is called Miso and she loves tuna.", "Noted: Miso likes tuna.")
# Another chat of the same person, every turn nearer the question than the fact is (kittens and their food).
NEIGHBOURS = [
    (f"What food should kitten number {i} eat?", f"Kitten {i} eats wet food twice a day.") for i in range(120)
]
QUESTION = "what does my kitten eat?"


def old_index_table(server, dimensions: int = 256) -> str:
    """A table whose vector index is the one an older version made: `kind` its only inline filter."""
    name = f"old-{uuid.uuid4().hex[:10]}"
    local_client(server).create_table(
        TableName=name,
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
            {"AttributeName": USER_ATTRIBUTE, "AttributeType": "S"},
            {"AttributeName": KIND_ATTRIBUTE, "AttributeType": "S"},
        ],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        BillingMode="PAY_PER_REQUEST",
        VectorIndexes=[
            {
                "IndexName": "vectors",
                "VectorAttribute": {"AttributeName": VECTOR_ATTRIBUTE},
                "SearchSchema": [
                    {"AttributeName": USER_ATTRIBUTE, "SearchSchemaElementType": "HASH"},
                    {"AttributeName": KIND_ATTRIBUTE, "SearchSchemaElementType": "INLINE_FILTER"},
                ],
                "Projection": {"ProjectionType": "ALL"},
                "Dimensions": dimensions,
                "DistanceFunction": "COSINE",
            }
        ],
    )
    return name


def test_recall_finds_this_chats_turn_when_another_chat_holds_a_hundred_nearer_ones(
    store, client, table, meter, requests
):
    indexer = indexer_for(client, table, meter)
    session, (fact,) = chat(store, indexer, "u-1", [FACT])
    chat(store, indexer, "u-1", NEIGHBOURS)
    vector = indexer.embedder.embed([QUESTION], "query").vectors[0]
    nearest = indexer.vectors.search("u-1", vector, TOP_K, kind="turn")
    assert len(nearest) == TOP_K and fact.message_id not in {h.item["message_id"] for h in nearest}  # crowded out
    requests.reset()
    found = HybridRecall(indexer, ContextCache()).recall("u-1", session.session_id, QUESTION, 3)
    assert [r.message.message_id for r in found] == [fact.message_id]
    assert requests.names == ["SearchVectors"]  # the fact's snippet is the whole turn: no read
    (search,) = [params for name, params in requests.calls if name == "SearchVectors"]
    assert search["SearchConditionExpression"] == "user_id = :u AND #k = :k AND #s = :s"
    assert search["ExpressionAttributeValues"][":s"] == {"S": session.session_id}


def test_an_index_without_the_chat_filter_still_answers_with_the_users_nearest(server, store, client, meter):
    from lib.search.embedders import LocalEmbedder
    from lib.search.indexer import Indexer
    from lib.storage.gateway import Gateway
    from lib.storage.store import ChatStore
    from lib.storage.vectors import VectorStore

    name = old_index_table(server)
    try:
        assert not filters_by_chat(vector_index_description(client, name))
        old = ChatStore(client, name, meter, cursor_secret="test-secret")
        LocalEmbedder._load()
        indexer = Indexer(VectorStore(Gateway(client, name, meter), chat_filter=False), LocalEmbedder())
        session, (fact,) = chat(old, indexer, "u-1", [FACT])
        chat(old, indexer, "u-1", NEIGHBOURS[:5])
        found = HybridRecall(indexer, ContextCache()).recall("u-1", session.session_id, QUESTION, 3)
        assert [r.message.message_id for r in found] == [fact.message_id]  # the other chat's hits are dropped
    finally:
        client.delete_table(TableName=name)


@pytest.fixture
def old_table_env(monkeypatch, server):
    name = old_index_table(server)
    monkeypatch.setenv("CHAT_TABLE", name)
    monkeypatch.setenv("CHAT_DATA_DIR", ":memory:")
    monkeypatch.setenv("CHAT_EMBED_MODEL", "wordllama-l2_supercat-256")  # the old table's model (256 dimensions)
    yield name
    local_client(server).delete_table(TableName=name)


def test_the_local_backend_makes_an_old_index_again_at_start_and_keeps_the_vectors(old_table_env, server):
    from lib.config import Settings
    from lib.database import open_database
    from lib.storage.vectors import TurnVector, VectorStore

    client = local_client(server)
    VectorStore.open(client, old_table_env).put_turns(
        "u-1", [TurnVector("s-1", "m-1", "Title", "a — b", "2026-01-01T00:00:00Z", "wordllama", [1.0] + [0.0] * 255)]
    )
    database = open_database(Settings.load(for_operator=True))
    assert filters_by_chat(vector_index_description(database.client, old_table_env))
    hits = VectorStore.open(database.client, old_table_env).search("u-1", [1.0] + [0.0] * 255, 5, session_id="s-1")
    assert [h.item["message_id"] for h in hits] == ["m-1"]  # backfilled from the items: nothing re-embedded
    assert (
        VectorStore.open(database.client, old_table_env).search("u-1", [1.0] + [0.0] * 255, 5, session_id="s-2") == []
    )


@pytest.fixture
def old_aws_table(monkeypatch, server):
    """The old table as an AWS deployment sees it (the embedded server standing in for DynamoDB's endpoint)."""
    from tests.test_database import AWS_SERVING

    name = old_index_table(server)
    old = {
        "CHAT_DYNAMODB_ENDPOINT": server.endpoint_url,
        "CHAT_TABLE": name,
        "CHAT_EMBED_MODEL": "wordllama-l2_supercat-256",
    }
    for key, value in {**AWS_SERVING, **old}.items():
        monkeypatch.setenv(key, value)
    yield name
    local_client(server).delete_table(TableName=name)


def test_on_aws_an_old_index_is_searched_without_the_filter_and_logged(old_aws_table, capsys):
    from lib.config import Settings
    from lib.search.indexer import searchable_indexer
    from lib.services import build_services

    svc = build_services(Settings.load(for_operator=True))
    try:
        indexer = searchable_indexer(svc)
        assert indexer is svc.indexer and indexer.vectors.chat_filter is False  # the index is left as it is
        assert "search.index_without_chat_filter" in capsys.readouterr().err
        assert indexer.vectors.search("u-1", [1.0] + [0.0] * 255, 5, kind="turn", session_id="s-1") == []
    finally:
        svc.ledger.close()


def test_add_vector_index_says_an_old_index_cannot_filter_by_chat_and_rebuild_makes_it_again(
    old_aws_table, server, capsys
):
    client = local_client(server)
    old_table_env = old_aws_table
    assert main(["add-vector-index", "--timeout", "5"]) == 0  # the old index still answers: it is left as it is
    assert "cannot filter a search by chat" in capsys.readouterr().err
    assert not filters_by_chat(vector_index_description(client, old_table_env))
    assert main(["add-vector-index", "--rebuild", "--timeout", "5"]) == 0
    captured = capsys.readouterr()
    assert "to make it again" in captured.err and "is searchable (256 dimensions)" in captured.out
    assert filters_by_chat(vector_index_description(client, old_table_env))
