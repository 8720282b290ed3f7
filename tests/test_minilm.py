"""The default offline embedder, all-MiniLM-L6-v2 run with numpy: its weights are the published ones or refused, its
forward pass gives the model's published vector, and choosing it (or going back) remakes the local index at its
size, with `reindex` embedding the old model's turns again."""

from __future__ import annotations

import shutil
import uuid

import pytest

from lib.config import Settings
from lib.database import local_client, open_database
from lib.errors import ConfigError, EmbedError
from lib.search import minilm
from lib.search.embedders import LOCAL_MODEL, MINILM_MODEL, LocalEmbedder, MiniLMEmbedder, make_embedder
from lib.search.hybrid import search_chats
from lib.search.indexer import Indexer, index_turn_after_save, reindex_user
from lib.storage.capacity import Meter
from lib.storage.gateway import Gateway
from lib.storage.schema import create_table, vector_index_description
from lib.storage.store import ChatStore
from tests.test_search import FACTS, finished_chat, vector_items

# The start of sentence-transformers' own example, `model.encode(["This is an example sentence"])` with this model,
# as its documentation prints it: a broken layer, norm or pooling step moves every one of these.
PUBLISHED_START = [0.0676569, 0.0634959, 0.0487131, 0.0793050, 0.0374481]


def cos(x, y) -> float:
    return sum(p * q for p, q in zip(x, y))


def test_the_forward_pass_gives_the_models_published_vector_with_no_network(no_network, monkeypatch):
    monkeypatch.setattr(MiniLMEmbedder, "_model", None)
    out = MiniLMEmbedder().embed(["This is an example sentence"], "query")
    (vector,) = out.vectors
    assert len(vector) == 384
    assert vector[:5] == pytest.approx(PUBLISHED_START, abs=1e-5)
    assert cos(vector, vector) == pytest.approx(1.0, abs=1e-5)


def test_a_paraphrase_sharing_no_word_is_nearer_than_an_unrelated_text():
    a, b, c = (
        MiniLMEmbedder()
        .embed(
            ["Our staging database lives in eu-west-1", "which region hosts the test db", "a recipe for sourdough"],
            "document",
        )
        .vectors
    )
    assert cos(a, b) > cos(a, c) + 0.1


def test_batches_of_mixed_lengths_give_each_text_its_own_vector():
    texts = ["short", "a much longer text about deploying the billing service " * 12, "medium length text"]
    together = MiniLMEmbedder().embed(texts, "document").vectors
    alone = [MiniLMEmbedder().embed([t], "document").vectors[0] for t in texts]
    for one, other in zip(together, alone):
        assert one == pytest.approx(other, abs=1e-5)


@pytest.mark.parametrize("name", ["tokenizer.json", "model.safetensors"])
def test_a_changed_weights_or_tokenizer_file_is_refused(tmp_path, name):
    folder = tmp_path / "model"
    shutil.copytree(minilm.model_folder(), folder)
    data = bytearray((folder / name).read_bytes())
    data[len(data) // 2] ^= 0x01
    (folder / name).write_bytes(bytes(data))
    with pytest.raises(EmbedError, match=f"{name} is not the published one"):
        minilm.MiniLM(folder)


def test_a_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(EmbedError, match="model.safetensors cannot be read"):
        minilm.MiniLM(tmp_path)


def test_settings_take_the_models_own_dimensions_and_refuse_others():
    default = Settings.load({}, {}, for_operator=True)
    assert (default.embed_model, default.embed_dimensions) == (MINILM_MODEL, 384)
    assert isinstance(make_embedder(default), MiniLMEmbedder)
    chosen = Settings.load({"CHAT_EMBED_MODEL": LOCAL_MODEL}, {}, for_operator=True)
    assert (chosen.embed_model, chosen.embed_dimensions) == (LOCAL_MODEL, 256)
    assert type(make_embedder(chosen)) is LocalEmbedder
    with pytest.raises(ConfigError, match="must be 384 for all-MiniLM-L6-v2"):
        Settings.load({"CHAT_EMBED_MODEL": MINILM_MODEL, "CHAT_EMBED_DIMENSIONS": "512"}, {}, for_operator=True)
    with pytest.raises(ConfigError, match="CHAT_EMBED_MODEL must be one of"):
        Settings.load({"CHAT_EMBED_MODEL": "bge-small"}, {}, for_operator=True)


@pytest.fixture
def table_of_384(server) -> str:
    """A table whose vector index has MiniLM's size (conftest's `table` has wordllama's 256)."""
    name = f"mini-{uuid.uuid4().hex[:8]}"
    client = local_client(server)
    create_table(client, name, vector_dimensions=384)
    yield name
    client.delete_table(TableName=name)


def test_search_with_the_model_finds_the_paraphrased_turn(client, table_of_384, meter):
    store = ChatStore(client, table_of_384, meter, cursor_secret="t")
    indexer = Indexer(Gateway(client, table_of_384, meter), MiniLMEmbedder())
    for question, answer in FACTS:
        session, message = finished_chat(store, "u-1", question, answer)
        assert index_turn_after_save(indexer, "u-1", session.title, message)
    outcome = search_chats(indexer.vectors, indexer.embedder, "u-1", "how do I bake a loaf")
    assert outcome.results[0].snippet.startswith(FACTS[1][0])
    assert {v["embed_model"] for v in vector_items(client, table_of_384, "u-1")} == {MINILM_MODEL}


@pytest.mark.parametrize("answer", ["Short.", "Ünïcødé 漢字 " * 800])
def test_a_turns_384_number_vector_item_is_3_wru_short_or_long(client, table_of_384, meter, answer):
    from lib.usage.ledger import Ledger

    ledger = Ledger(client, table_of_384, meter)
    store = ChatStore(client, table_of_384, meter, cursor_secret="t")
    session, message = finished_chat(store, "u-1", "Q " * 900, answer)
    assert index_turn_after_save(Indexer(Gateway(client, table_of_384, meter), MiniLMEmbedder()), "u-1", "T", message)
    (bucket,) = [b for b in ledger.pending() if b.user == "u-1"]
    assert (bucket.counters["n.index"], bucket.counters["w.index"]) == (1, 3)  # 4-digit numbers, bounded snippet


def test_choosing_the_model_remakes_the_local_index_at_its_size_and_reindex_embeds_the_old_turns(server, capsys):
    name = f"switch-{uuid.uuid4().hex[:8]}"
    client = local_client(server)
    create_table(client, name, vector_dimensions=256)
    try:
        meter = Meter(trust_reported=False)
        store = ChatStore(client, name, meter, cursor_secret="t")
        old = Indexer(Gateway(client, name, meter), LocalEmbedder())
        for question, answer in FACTS:
            session, message = finished_chat(store, "u-1", question, answer)
            index_turn_after_save(old, "u-1", session.title, message)
        env = {"CHAT_TABLE": name, "CHAT_DATA_DIR": ":memory:", "CHAT_EMBED_MODEL": MINILM_MODEL}
        capsys.readouterr()
        database = open_database(Settings.load(env, {}, for_operator=True))
        index = vector_index_description(database.client, name)
        assert (index["Dimensions"], index["IndexStatus"]) == (384, "ACTIVE")
        said = [line for line in capsys.readouterr().err.splitlines() if "vector_index.rebuilt" in line]
        assert len(said) == 1 and '"reason": "dimensions"' in said[0] and "lib.admin reindex" in said[0]
        new = Indexer(Gateway(client, name, meter), MiniLMEmbedder())
        # The old model's vectors are still on their items but out of the 384-number index: nothing is found.
        assert search_chats(new.vectors, new.embedder, "u-1", "how do I bake a loaf").results == []
        assert reindex_user(new, "u-1").turns == 3
        assert {v["embed_model"] for v in vector_items(client, name, "u-1")} == {MINILM_MODEL}
        found = search_chats(new.vectors, new.embedder, "u-1", "how do I bake a loaf")
        assert found.results[0].snippet.startswith(FACTS[1][0])
    finally:
        client.delete_table(TableName=name)


@pytest.fixture
def aws_table_of_256(monkeypatch, server):
    """A table whose index was made for the 256-number model, as an AWS deployment sees it."""
    from tests.test_database import AWS_SERVING

    name = f"aws256-{uuid.uuid4().hex[:8]}"
    create_table(local_client(server), name, vector_dimensions=256)
    for key, value in {**AWS_SERVING, "CHAT_DYNAMODB_ENDPOINT": server.endpoint_url, "CHAT_TABLE": name}.items():
        monkeypatch.setenv(key, value)
    yield name
    local_client(server).delete_table(TableName=name)


def test_on_aws_an_index_of_another_size_is_left_alone_and_said_once(aws_table_of_256, monkeypatch, capsys):
    from lib.search.indexer import searchable_indexer
    from lib.services import build_services

    monkeypatch.setenv("CHAT_EMBED_MODEL", MINILM_MODEL)
    svc = build_services(Settings.load(for_operator=True))
    try:
        assert searchable_indexer(svc) is None and searchable_indexer(svc) is None  # keyword recall and search only
        said = [line for line in capsys.readouterr().err.splitlines() if "search.index_dimensions_differ" in line]
        assert len(said) == 1 and '"index": 256' in said[0] and '"embedder": 384' in said[0]
        assert vector_index_description(svc.database.client, aws_table_of_256)["Dimensions"] == 256
    finally:
        svc.ledger.close()


def test_a_failed_background_load_is_logged_and_the_embed_call_says_why(tmp_path, monkeypatch, capsys):
    import threading

    monkeypatch.setattr(minilm, "model_folder", lambda: tmp_path)  # installed, but its files are gone
    monkeypatch.setattr(MiniLMEmbedder, "_model", None)
    monkeypatch.setattr(MiniLMEmbedder, "_warming", False)
    assert MiniLMEmbedder().ready() is False
    for thread in threading.enumerate():
        if thread.name == "embedder-load":
            thread.join()
    said = [line for line in capsys.readouterr().err.splitlines() if "embedder.load_failed" in line]
    assert len(said) == 1 and MINILM_MODEL in said[0] and "cannot be read" in said[0]
    assert MiniLMEmbedder().ready() is False  # not loaded, not tried again in the background
    with pytest.raises(EmbedError, match="cannot be read"):
        MiniLMEmbedder().embed(["a question"], "query")
