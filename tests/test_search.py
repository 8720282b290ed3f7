"""Semantic search: the offline and Bedrock embedders, vector items written after a turn is saved, memories'
vectors, hybrid search scoped to the signed-in user, and what it costs (all on the embedded server)."""

from __future__ import annotations

import pytest

from lib.config import Settings
from lib.search import embedders
from lib.search.embedders import (
    BedrockEmbedder,
    EmbedError,
    LocalEmbedder,
    make_embedder,
)
from lib.search.hybrid import highlight, search_chats
from lib.search.indexer import Indexer, index_turn_after_save, reindex_user
from lib.storage import keys
from lib.storage.gateway import Gateway, from_item, to_item
from lib.storage.memories import MemoryStore
from lib.storage.records import DONE, Message
from lib.storage.vectors import SNIPPET_CHARS, VectorStore, snippet_turn
from lib.usage.ledger import Ledger
from tests.fake_bedrock_embed import FakeBedrockEmbed

FACTS = [
    ("How do I deploy the billing service to staging?", "Run the deploy pipeline with the staging target."),
    ("What is a good recipe for sourdough bread?", "Mix flour, water, salt and your starter; proof overnight."),
    ("Which python library parses YAML files?", "PyYAML or ruamel.yaml both parse YAML documents."),
]


def finished_chat(store, user: str, question: str, answer: str):
    session, message = store.create_session(user, question, system_prompt_id="p")
    done = store.finish_message(
        user,
        message,
        output_body=answer,
        input_token=1,
        output_token=1,
        response_start_time=message.create_time,
        response_end_time=message.create_time,
    )
    return session, done


@pytest.fixture
def indexer(client, table, meter) -> Indexer:
    return Indexer(Gateway(client, table, meter), LocalEmbedder())


def vector_items(client, table, user: str) -> list[dict]:
    items = client.query(
        TableName=table,
        KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
        ExpressionAttributeValues=to_item({":pk": keys.user_pk(user), ":p": "VEC#"}),
    )["Items"]
    return [from_item(i) for i in items]


def test_the_local_embedder_loads_the_bundled_weights_with_no_network(no_network, monkeypatch):
    monkeypatch.setattr(LocalEmbedder, "_model", None)
    out = LocalEmbedder().embed(
        ["deploy the billing service", "ship billing to staging", "sourdough bread"], "document"
    )
    assert [len(v) for v in out.vectors] == [256, 256, 256]
    a, b, c = out.vectors

    def cos(x, y):
        return sum(p * q for p, q in zip(x, y))

    assert cos(a, b) > cos(a, c)


def test_a_saved_turn_gets_one_searchable_vector_item_idempotently(store, indexer, client, table):
    session, message = finished_chat(store, "u-1", *FACTS[0])
    assert index_turn_after_save(indexer, "u-1", session.title, message)
    assert index_turn_after_save(indexer, "u-1", session.title, message)  # idempotent: the same key
    (item,) = vector_items(client, table, "u-1")
    assert item["sk"] == f"VEC#{session.session_id}#{message.message_id}"
    assert (item["user_id"], item["kind"], item["session_id"], item["message_id"]) == (
        "u-1",
        "turn",
        session.session_id,
        message.message_id,
    )
    assert item["embed_model"] == "wordllama-l2_supercat-256" and len(item["embedding"]) == 256
    assert item["title"] == session.title and item["snippet"].startswith(FACTS[0][0])
    # The snippet says where its question ends and that it is the whole turn: recall sends it without a read.
    assert snippet_turn(item) == (FACTS[0][0], FACTS[0][1], True)


@pytest.mark.parametrize(
    "question, answer, whole",
    [
        ("Where is staging?", "In eu-west-1.", True),
        ("Where is staging?", "In eu-west-1. " * 40, False),  # the answer past the snippet's bound
        ("Where  is\nstaging?  " + "x" * 300, "Here.", False),  # the question past its 240 characters
    ],
)
def test_a_snippet_tells_its_two_sides_and_whether_it_is_whole(question, answer, whole):
    from lib.search.indexer import turn_vector

    turn = Message("m-1", "s-1", "2026-01-01T00:00:00.000Z", question, "p", DONE, answer)
    item = from_item(turn_vector("t", turn, "model", [0.0] * 4).item("u-1"))
    q, a, told = snippet_turn(item)
    assert told is whole and " ".join(question.split()).startswith(q.removesuffix(" …"))
    assert " ".join(answer.split()).startswith(a.removesuffix(" …"))
    if whole:  # the turn itself, its whitespace collapsed
        assert (q, a) == (" ".join(question.split()), " ".join(answer.split()))
    else:  # a start of it, shorter than the turn
        assert len(q) + len(a) < len(" ".join(question.split())) + len(" ".join(answer.split()))
    assert len(item["snippet"]) <= SNIPPET_CHARS


def test_a_snippet_of_a_body_kept_as_an_object_or_of_an_older_item_is_never_taken_as_whole():
    from lib.search.indexer import turn_vector
    from lib.storage.objects import BodyRef

    ref = BodyRef("users/u-1/bodies/s-1/m-1/output", 9000, "0" * 64)
    turn = Message("m-1", "s-1", "2026-01-01T00:00:00.000Z", "Q?", "p", DONE, "the first 4 KB", output_ref=ref)
    item = from_item(turn_vector("t", turn, "model", [0.0] * 4).item("u-1"))
    assert snippet_turn(item)[2] is False  # the item holds only the body's start
    # An item written before snippets said where the question ends: split at its first separator, never whole.
    assert snippet_turn({"snippet": "Q? — A.", "snippet_whole": True}) == ("Q?", "A.", False)
    assert snippet_turn({"snippet": "Q? — A.", "snippet_q": 99, "snippet_whole": True}) is None  # out of range
    assert snippet_turn({"snippet": "Q?— A.", "snippet_q": 2}) is None  # the separator is not where it says
    assert snippet_turn({"snippet": "Q? — ", "snippet_q": 2}) is None  # no answer: never sent as a turn


def test_text_whose_line_breaks_carry_meaning_is_never_taken_as_whole_from_its_snippet():
    from lib.search.indexer import turn_vector

    code = "```python\nif ready:\n    start()\n```"
    turn = Message("m-1", "s-1", "2026-01-01T00:00:00.000Z", "How do I start it?", "p", DONE, code)
    item = from_item(turn_vector("t", turn, "model", [0.0] * 4).item("u-1"))
    assert snippet_turn(item)[2] is False  # the snippet collapses the indentation: recall reads the turn


def test_a_cut_sides_end_is_marked_so_the_model_knows_it_was_cut():
    from lib.search.indexer import turn_vector

    turn = Message("m-1", "s-1", "2026-01-01T00:00:00.000Z", "Q " * 200, "p", DONE, "answer " * 100)
    q, a, whole = snippet_turn(from_item(turn_vector("t", turn, "model", [0.0] * 4).item("u-1")))
    assert not whole and q.endswith(" …") and a.endswith(" …")


def test_a_failed_turn_has_no_vector_until_its_retry_is_answered(store, indexer, client, table):
    session, message = store.create_session("u-1", FACTS[0][0], system_prompt_id="p")
    failed = store.fail_message("u-1", message, output_body="", error="overloaded")
    assert not index_turn_after_save(indexer, "u-1", session.title, failed)
    assert vector_items(client, table, "u-1") == []
    retried = store.restart_message("u-1", failed)
    again = store.finish_message(
        "u-1",
        retried,
        output_body="Use the new release train instead.",
        input_token=1,
        output_token=1,
        response_start_time=retried.create_time,
        response_end_time=retried.create_time,
    )
    assert index_turn_after_save(indexer, "u-1", session.title, again)
    (item,) = vector_items(client, table, "u-1")
    assert "release train" in item["snippet"] and item["message_id"] == message.message_id


def test_every_vector_item_is_searchable(store, indexer, client, table):
    for question, answer in FACTS:
        session, message = finished_chat(store, "u-1", question, answer)
        index_turn_after_save(indexer, "u-1", session.title, message)
    written = {i["sk"] for i in vector_items(client, table, "u-1")}
    found = VectorStore(indexer.db).search("u-1", [1.0] + [0.0] * 255, 100)
    assert (
        len(written) == 3
        and {keys.vector_key("u-1", h.item["session_id"], h.item["message_id"])["sk"] for h in found} == written
    )


def test_hybrid_search_finds_the_paraphrased_turn_first(store, indexer):
    for question, answer in FACTS:
        session, message = finished_chat(store, "u-1", question, answer)
        index_turn_after_save(indexer, "u-1", session.title, message)
    outcome = search_chats(indexer.vectors, indexer.embedder, "u-1", "sourdough starter")
    assert outcome.results[0].snippet.startswith(FACTS[1][0])
    assert len(outcome.results) == 3 and outcome.note is None


@pytest.mark.parametrize("query, note", [("", "at least two"), ("x", "at least two"), ("   \x00\x07 ", "at least two")])
def test_empty_and_one_character_queries_search_nothing(indexer, requests, query, note):
    outcome = search_chats(indexer.vectors, indexer.embedder, "u-1", query)
    assert outcome.results == [] and note in outcome.note
    assert "SearchVectors" not in requests.names


def test_a_huge_or_hostile_query_is_cut_and_searched_harmlessly(store, indexer):
    session, message = finished_chat(store, "u-1", *FACTS[0])
    index_turn_after_save(indexer, "u-1", session.title, message)
    outcome = search_chats(
        indexer.vectors, indexer.embedder, "u-1", "<img src=x onerror=alert(1)> ![a](http://x) " + "deploy " * 500
    )
    assert len(outcome.query) == 500 and "first 500 characters" in outcome.note
    assert [r.message_id for r in outcome.results] == [message.message_id]


def test_another_users_vectors_are_unreachable(store, indexer):
    session, message = finished_chat(store, "alice", *FACTS[0])
    index_turn_after_save(indexer, "alice", session.title, message)
    for query in (FACTS[0][0], "alice", session.session_id, "user_id = alice"):
        assert search_chats(indexer.vectors, indexer.embedder, "bob", query).results == []
    with pytest.raises(ValueError):
        VectorStore(indexer.db).search("", [0.1] * 256, 10)


def test_the_open_session_query_reads_the_same_units_with_vectors(store, indexer, meter):
    session, message = finished_chat(store, "u-1", *FACTS[0])
    meter.clear()
    store.open_session("u-1", session.session_id)
    before = [u.modeled for u in meter.records() if u.action == "open"]
    index_turn_after_save(indexer, "u-1", session.title, message)
    meter.clear()
    store.open_session("u-1", session.session_id)
    store.list_sessions("u-1")
    assert [u.modeled for u in meter.records() if u.action == "open"] == before == [1.0]
    assert [u.modeled for u in meter.records() if u.action == "sidebar"] == [1.0]


def test_memory_vectors_follow_edits_and_deletes(client, table, meter, indexer):
    memories = MemoryStore(client, table, meter)
    memory = memories.add("u-1", "I am the on-call lead for the payments team", session_id=None, message_id=None)
    assert indexer.index_memory("u-1", memory)
    hits = VectorStore(indexer.db).search(
        "u-1", LocalEmbedder().embed(["payments on-call"], "query").vectors[0], 5, kind="memory"
    )
    assert [h.item["sk"] for h in hits] == [keys.memory_key("u-1", memory.memory_id)["sk"]]
    edited = memories.edit("u-1", memory, "I am the on-call lead for the search team")
    assert VectorStore(indexer.db).search("u-1", [0.1] * 256, 5, kind="memory") == []  # the stale vector is gone
    assert not indexer.vectors.set_memory_vector("u-1", memory.memory_id, memory.text, "m", [0.1] * 256)
    assert indexer.index_memory("u-1", edited)
    memories.delete("u-1", memory.memory_id)
    assert VectorStore(indexer.db).search("u-1", [0.1] * 256, 5, kind="memory") == []


def test_reindex_embeds_what_lacks_a_vector_and_resumes(store, indexer, client, table, meter, requests):
    for question, answer in FACTS:
        finished_chat(store, "u-1", question, answer)
    MemoryStore(client, table, meter).add("u-1", "I am a vegetarian", session_id=None, message_id=None)
    first = reindex_user(indexer, "u-1")
    assert (first.sessions, first.turns, first.memories) == (3, 3, 1)
    requests.reset()
    again = reindex_user(indexer, "u-1")
    assert (again.turns, again.memories, again.skipped) == (0, 0, 4)
    # Done chats are skipped by their metas' counts: vectors, sidebar, metas, memories, memory vectors; no turn read.
    assert requests.names == ["Query", "Query", "BatchGetItem", "Query", "Query"]
    assert reindex_user(indexer, "u-1", everything=True).turns == 3


def test_index_and_search_are_metered_in_vector_bytes(store, indexer, client, table, meter):
    ledger = Ledger(client, table, meter)
    session, message = finished_chat(store, "u-1", *FACTS[0])
    index_turn_after_save(indexer, "u-1", session.title, message)
    search_chats(indexer.vectors, indexer.embedder, "u-1", "deploy staging")
    (bucket,) = [b for b in ledger.pending() if b.user == "u-1"]
    assert bucket.counters["n.index"] == 1 and bucket.counters["w.index"] == 2  # a 256-d vector item: 2 WRU
    assert bucket.counters["vb.index"] > 4 * 256 and bucket.counters["vb.search"] > 4 * 256
    assert bucket.counters["n.search"] == 1 and "r.search" not in bucket.counters


def test_highlight_marks_words_and_cjk_runs_as_plain_segments():
    assert highlight("Deploying the billing service", "deploy billing") == [
        ("Deploying", True),
        (" the ", False),
        ("billing", True),
        (" service", False),
    ]
    assert highlight("帮我约周三下午开会", "周三下午") == [("帮我约", False), ("周三下午", True), ("开会", False)]
    assert highlight("nothing here", "") == [("nothing here", False)]


class TestBedrock:
    @pytest.fixture
    def fake(self):
        fake = FakeBedrockEmbed()
        yield fake
        fake.close()

    def settings(self, fake, **extra) -> Settings:
        env = {
            "CHAT_EMBED_PROVIDER": "bedrock",
            "CHAT_EMBED_BASE_URL": fake.url,
            "CHAT_EMBED_REGION": "us-west-2",
            "AWS_ACCESS_KEY_ID": "x",
            "AWS_SECRET_ACCESS_KEY": "y",
            **extra,
        }
        return Settings.load(env, {}, for_operator=True)

    def test_cohere_v4_documents_and_queries(self, fake, monkeypatch):
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
        embedder = make_embedder(self.settings(fake, CHAT_EMBED_DIMENSIONS="512"))
        assert isinstance(embedder, BedrockEmbedder) and embedder.model == "us.cohere.embed-v4:0"
        out = embedder.embed(["stored text", "more"], "document")
        embedder.embed(["a question"], "query")
        assert [len(v) for v in out.vectors] == [512, 512] and out.tokens == 11
        doc, query = fake.requests
        assert doc["path"] == "/model/us.cohere.embed-v4:0/invoke"
        assert doc["body"] == {
            "texts": ["stored text", "more"],
            "input_type": "search_document",
            "output_dimension": 512,
            "embedding_types": ["float"],
            "truncate": "RIGHT",
        }
        assert query["body"]["input_type"] == "search_query"
        assert "us-west-2/bedrock/aws4_request" in doc["headers"]["authorization"]

    def test_titan_v2(self, fake):
        embedder = make_embedder(
            self.settings(fake, CHAT_EMBED_MODEL="amazon.titan-embed-text-v2:0", CHAT_EMBED_DIMENSIONS="256")
        )
        out = embedder.embed(["one", "two"], "query")
        assert [r["body"] for r in fake.requests] == [
            {"inputText": "one", "dimensions": 256, "normalize": True},
            {"inputText": "two", "dimensions": 256, "normalize": True},
        ]
        assert out.tokens == 22 and out.vectors[0] == [0.5] * 256

    def test_a_refusal_is_an_embed_error_and_indexing_skips_the_turn(self, fake, store, client, table, meter):
        fake.status = 400
        embedder = make_embedder(self.settings(fake))
        with pytest.raises(EmbedError):
            embedder.embed(["x"], "document")
        session, message = finished_chat(store, "u-1", *FACTS[0])
        assert not index_turn_after_save(
            Indexer(Gateway(client, table, meter), embedder), "u-1", session.title, message
        )
        assert vector_items(client, table, "u-1") == []


def test_settings_refuse_dimensions_the_model_cannot_give():
    from lib.errors import ConfigError

    with pytest.raises(ConfigError, match="must be 384 for all-MiniLM-L6-v2"):
        Settings.load({"CHAT_EMBED_DIMENSIONS": "512"}, {}, for_operator=True)
    with pytest.raises(ConfigError, match="must be 256 for wordllama"):
        Settings.load(
            {"CHAT_EMBED_MODEL": "wordllama-l2_supercat-256", "CHAT_EMBED_DIMENSIONS": "384"}, {}, for_operator=True
        )
    with pytest.raises(ConfigError, match="256, 512, 1024"):
        Settings.load(
            {
                "CHAT_EMBED_PROVIDER": "bedrock",
                "CHAT_EMBED_MODEL": "amazon.titan-embed-text-v2:0",
                "CHAT_EMBED_DIMENSIONS": "1536",
            },
            {},
            for_operator=True,
        )
    assert embedders.make_embedder(Settings.load({"CHAT_EMBED_PROVIDER": "off"}, {}, for_operator=True)) is None


def test_an_existing_local_table_gets_the_vector_index_when_the_app_starts(server):
    import uuid

    from lib.database import local_client, open_database
    from lib.storage.schema import create_table, vector_index_description

    name = f"old-{uuid.uuid4().hex[:8]}"
    create_table(local_client(server), name, vector_dimensions=None)
    try:
        database = open_database(
            Settings.load({"CHAT_TABLE": name, "CHAT_DATA_DIR": ":memory:"}, {}, for_operator=True)
        )
        index = vector_index_description(database.client, name)
        assert (index["Dimensions"], index["IndexStatus"], index["Backfilling"]) == (384, "ACTIVE", False)  # MiniLM
    finally:
        local_client(server).delete_table(TableName=name)


def test_embedding_tokens_reach_the_ledger_free_locally_unknown_on_bedrock_until_priced(store, client, table, meter):
    from lib.usage.pricing import Prices

    ledger = Ledger(client, table, meter)
    indexer = Indexer(Gateway(client, table, meter), LocalEmbedder(), ledger)
    session, message = finished_chat(store, "u-1", *FACTS[0])
    index_turn_after_save(indexer, "u-1", session.title, message)
    (bucket,) = [b for b in ledger.pending() if b.user == "u-1"]
    assert bucket.counters["tn|wordllama-l2_supercat-256"] == 1 and bucket.counters["ti|wordllama-l2_supercat-256"] > 0
    assert Prices.from_settings(Settings.load({}, {}, for_operator=True)).model_price("wordllama-l2_supercat-256") == (
        0.0,
        0.0,
    )
    bedrock = Settings.load({"CHAT_EMBED_PROVIDER": "bedrock"}, {}, for_operator=True)
    assert Prices.from_settings(bedrock).model_price("us.cohere.embed-v4:0") is None
    priced = Settings.load({"CHAT_EMBED_PROVIDER": "bedrock", "CHAT_PRICE_EMBED_PER_M": "0.12"}, {}, for_operator=True)
    assert Prices.from_settings(priced).model_price("us.cohere.embed-v4:0") == (0.12, 0.0)


def test_a_vector_index_added_while_the_app_runs_is_seen_after_the_negative_answer_expires(server, monkeypatch, capsys):
    """The app asked once and was told "no index"; an operator adds it with `python -m lib.admin add-vector-index`;
    the running app's next ask, once the negative answer has expired, finds it without a restart."""
    import uuid
    from types import SimpleNamespace

    from lib import admin
    from lib.database import Database, local_client
    from lib.search import indexer as indexer_module
    from lib.search.indexer import searchable_indexer
    from lib.storage.capacity import Meter
    from lib.storage.schema import create_table

    name = f"late-{uuid.uuid4().hex[:8]}"
    create_table(local_client(server), name, vector_dimensions=None)
    now = [1000.0]
    monkeypatch.setattr(indexer_module, "_clock", lambda: now[0], raising=False)  # the cache's clock, not sleep
    monkeypatch.setenv("CHAT_TABLE", name)
    monkeypatch.setenv("CHAT_DATA_DIR", ":memory:")
    settings = Settings.load(for_operator=True)
    meter = Meter(trust_reported=False)
    running = SimpleNamespace(
        settings=settings,
        ledger=None,
        database=Database(meter.install(local_client(server)), name, meter, "local embedded DynamoDB", local=True),
    )
    try:
        assert searchable_indexer(running) is None  # asked before the index exists
        assert admin.main(["add-vector-index"]) == 0  # the operator's command, as shipped
        assert "is searchable" in capsys.readouterr().out
        now[0] += 1
        assert searchable_indexer(running) is None  # a negative answer is kept a while: no DescribeTable per run
        now[0] += 60
        found = searchable_indexer(running)
        assert found is not None and found.embedder.dimensions == 384  # the default local model's
        now[0] += 10**6
        assert searchable_indexer(running) is not None  # a positive answer is kept
    finally:
        local_client(server).delete_table(TableName=name)
