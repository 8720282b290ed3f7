"""The embedded DynamoDB's vector indexes: definitions, SearchVectors answered exactly, (de)indexing by
every write operation, DynamoDB's validation errors, and the vectors kept on disk with their items."""

from __future__ import annotations

import math
import uuid
from typing import Any

import numpy as np
import pytest
from botocore.exceptions import ClientError

from lib.database import local_client
from lib.embedded.server import LocalDynamo
from lib.storage.schema import (
    VECTOR_ATTRIBUTE_DEFINITIONS,
    add_vector_index,
    create_table,
    table_exists,
    vector_index,
    vector_index_description,
)

DIMS = 4


def vec(*values: float) -> dict:
    return {"L": [{"N": repr(float(v))} for v in values]}


def item(user: str, sk: str, vector: tuple | None, kind: str = "turn", **extra: Any) -> dict:
    out = {
        "pk": {"S": f"USER#{user}"},
        "sk": {"S": sk},
        "user_id": {"S": user},
        "kind": {"S": kind},
        "text": {"S": f"text of {sk}"},
        **{k: {"S": v} for k, v in extra.items()},
    }
    if vector is not None:
        out["embedding"] = vec(*vector)
    return out


def search(client: Any, table: str, user: str, query: tuple, top_k: int = 10, **params: Any) -> dict:
    values = {":u": {"S": user}, **params.pop("values", {})}
    return client.search_vectors(
        TableName=table,
        IndexName="vectors",
        SearchVector=vec(*query)["L"],
        TopK=top_k,
        SearchConditionExpression=params.pop("condition", "user_id = :u"),
        ExpressionAttributeValues=values,
        **params,
    )


def sks(answer: dict) -> list[str]:
    return [r["Item"]["sk"]["S"] for r in answer["SearchResults"]]


@pytest.fixture
def vtable(server) -> Any:
    client = local_client(server)
    name = f"v-{uuid.uuid4().hex[:10]}"
    create_table(client, name, vector_dimensions=DIMS)
    yield client, name
    client.delete_table(TableName=name)


def test_describe_table_shows_the_index_active_and_not_backfilling(vtable):
    client, table = vtable
    index = vector_index_description(client, table)
    assert index["IndexStatus"] == "ACTIVE" and index["Backfilling"] is False
    assert index["Dimensions"] == DIMS and index["DistanceFunction"] == "COSINE"
    assert index["SearchSchema"] == [
        {"AttributeName": "user_id", "SearchSchemaElementType": "HASH"},
        {"AttributeName": "kind", "SearchSchemaElementType": "INLINE_FILTER"},
        {"AttributeName": "session_id", "SearchSchemaElementType": "INLINE_FILTER"},
    ]


def test_cosine_scores_and_order_are_exact_and_scoped_to_one_user(vtable):
    client, table = vtable
    client.put_item(TableName=table, Item=item("a", "VEC#1", (1, 0, 0, 0)))
    client.put_item(TableName=table, Item=item("a", "VEC#2", (0, 1, 0, 0)))
    client.put_item(TableName=table, Item=item("a", "VEC#3", (-1, 0, 0, 0)))
    client.put_item(TableName=table, Item=item("b", "VEC#9", (1, 0, 0, 0)))
    answer = search(client, table, "a", (1, 0, 0, 0))
    assert sks(answer) == ["VEC#1", "VEC#2", "VEC#3"]
    assert [r["Score"] for r in answer["SearchResults"]] == pytest.approx([0.0, 1.0, 2.0])
    assert all(r["Item"]["user_id"] == {"S": "a"} for r in answer["SearchResults"])
    assert sks(search(client, table, "b", (1, 0, 0, 0))) == ["VEC#9"]
    assert search(client, table, "nobody", (1, 0, 0, 0))["SearchResults"] == []


def test_the_vector_is_returned_only_when_projected(vtable):
    client, table = vtable
    client.put_item(TableName=table, Item=item("a", "VEC#1", (0.5, 0.25, 0, 1)))
    plain = search(client, table, "a", (1, 0, 0, 0))["SearchResults"][0]["Item"]
    assert "embedding" not in plain and plain["text"] == {"S": "text of VEC#1"}
    projected = search(
        client, table, "a", (1, 0, 0, 0), ProjectionExpression="sk, #e", ExpressionAttributeNames={"#e": "embedding"}
    )["SearchResults"][0]["Item"]
    assert set(projected) == {"sk", "embedding"}
    assert [float(n["N"]) for n in projected["embedding"]["L"]] == [0.5, 0.25, 0.0, 1.0]


def test_inline_filter_equality_and_top_k(vtable):
    client, table = vtable
    for i in range(5):
        client.put_item(TableName=table, Item=item("a", f"VEC#{i}", (1, i, 0, 0), kind="turn"))
    client.put_item(TableName=table, Item=item("a", "MEM#1", (1, 0, 0, 0), kind="memory"))
    answer = search(
        client,
        table,
        "a",
        (1, 0, 0, 0),
        top_k=2,
        condition="user_id = :u AND #k = :k",
        ExpressionAttributeNames={"#k": "kind"},
        values={":k": {"S": "memory"}},
    )
    assert sks(answer) == ["MEM#1"]
    assert sks(
        search(
            client,
            table,
            "a",
            (1, 0, 0, 0),
            top_k=2,
            condition="user_id = :u AND kind = :k",
            values={":k": {"S": "turn"}},
        )
    ) == ["VEC#0", "VEC#1"]


def test_every_write_operation_indexes_and_deindexes(vtable):
    client, table = vtable
    client.batch_write_item(
        RequestItems={table: [{"PutRequest": {"Item": item("a", f"VEC#b{i}", (1, i + 1, 0, 0))}} for i in range(3)]}
    )
    client.transact_write_items(TransactItems=[{"Put": {"TableName": table, "Item": item("a", "VEC#t", (0, 0, 1, 0))}}])
    assert sorted(sks(search(client, table, "a", (1, 0, 0, 0)))) == ["VEC#b0", "VEC#b1", "VEC#b2", "VEC#t"]
    # An UpdateItem that changes the vector re-indexes it; one that removes it de-indexes the item.
    client.update_item(
        TableName=table,
        Key={"pk": {"S": "USER#a"}, "sk": {"S": "VEC#t"}},
        UpdateExpression="SET embedding = :e",
        ExpressionAttributeValues={":e": vec(1, 0, 0, 0)},
    )
    assert sks(search(client, table, "a", (1, 0, 0, 0), top_k=1)) == ["VEC#t"]
    client.update_item(
        TableName=table, Key={"pk": {"S": "USER#a"}, "sk": {"S": "VEC#b1"}}, UpdateExpression="REMOVE embedding"
    )
    client.delete_item(TableName=table, Key={"pk": {"S": "USER#a"}, "sk": {"S": "VEC#b2"}})
    client.batch_write_item(
        RequestItems={table: [{"DeleteRequest": {"Key": {"pk": {"S": "USER#a"}, "sk": {"S": "VEC#b0"}}}}]}
    )
    assert sks(search(client, table, "a", (1, 0, 0, 0))) == ["VEC#t"]


def test_an_item_without_user_id_is_written_but_never_indexed(vtable):
    client, table = vtable
    orphan = item("a", "VEC#x", (1, 0, 0, 0))
    del orphan["user_id"]
    client.put_item(TableName=table, Item=orphan)
    assert client.get_item(TableName=table, Key={"pk": orphan["pk"], "sk": orphan["sk"]})["Item"]
    assert search(client, table, "a", (1, 0, 0, 0))["SearchResults"] == []


def test_euclidean_and_dot_product_follow_botocores_conventions(server):
    client = local_client(server)
    name = f"v-{uuid.uuid4().hex[:10]}"
    index = {
        "IndexName": "vectors",
        "VectorAttribute": {"AttributeName": "embedding"},
        "SearchSchema": [{"AttributeName": "user_id", "SearchSchemaElementType": "HASH"}],
        "Projection": {"ProjectionType": "KEYS_ONLY"},
        "Dimensions": 2,
    }
    client.create_table(
        TableName=name,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": a, "AttributeType": "S"} for a in ("pk", "sk", "user_id")],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        VectorIndexes=[
            {**index, "DistanceFunction": "EUCLIDEAN"},
            {**index, "IndexName": "dots", "DistanceFunction": "DOT_PRODUCT"},
        ],
    )
    try:
        for sk, v in (("near", (1, 1)), ("far", (4, 5)), ("long", (10, 10))):
            client.put_item(
                TableName=name,
                Item={
                    "pk": {"S": "p"},
                    "sk": {"S": sk},
                    "user_id": {"S": "a"},
                    "embedding": vec(*v),
                    "text": {"S": "not projected"},
                },
            )
        common = dict(
            TableName=name,
            SearchVector=vec(1, 1)["L"],
            TopK=3,
            SearchConditionExpression="user_id = :u",
            ExpressionAttributeValues={":u": {"S": "a"}},
        )
        euclid = client.search_vectors(IndexName="vectors", **common)["SearchResults"]
        assert [r["Item"]["sk"]["S"] for r in euclid] == ["near", "far", "long"]
        assert [r["Score"] for r in euclid] == pytest.approx([0.0, 5.0, math.sqrt(162)])
        assert set(euclid[0]["Item"]) == {"pk", "sk", "user_id"}  # KEYS_ONLY: keys and the search schema
        dots = client.search_vectors(IndexName="dots", **common)["SearchResults"]
        assert [r["Item"]["sk"]["S"] for r in dots] == ["long", "far", "near"]
        assert [r["Score"] for r in dots] == pytest.approx([20.0, 9.0, 2.0])
    finally:
        client.delete_table(TableName=name)


@pytest.mark.parametrize(
    "params, message",
    [
        ({"query": (1, 0)}, "dimensions of SearchVector (2)"),
        ({"condition": "kind = :k", "values": {":k": {"S": "turn"}}}, "partition attribute"),
        ({"condition": "user_id <> :u"}, "only = is"),
        ({"condition": "user_id = :u AND text = :t", "values": {":t": {"S": "x"}}}, "not in the search schema"),
        ({"top_k": 101}, "TopK must be between 1 and 100"),
    ],
)
def test_validation_errors_as_dynamodb_gives_them(vtable, params, message):
    client, table = vtable
    query = params.pop("query", (1, 0, 0, 0))
    with pytest.raises(ClientError) as caught:
        search(client, table, "a", query, **params)
    assert caught.value.response["Error"]["Code"] == "ValidationException"
    assert message in caught.value.response["Error"]["Message"]


def test_a_put_with_a_vector_of_the_wrong_length_is_refused_and_changes_nothing(vtable):
    client, table = vtable
    with pytest.raises(ClientError) as caught:
        client.put_item(TableName=table, Item=item("a", "VEC#1", (1, 0)))
    assert caught.value.response["Error"]["Code"] == "ValidationException"
    assert "Item" not in client.get_item(TableName=table, Key={"pk": {"S": "USER#a"}, "sk": {"S": "VEC#1"}})


def test_an_unknown_index_is_not_found(vtable):
    client, table = vtable
    with pytest.raises(ClientError) as caught:
        client.search_vectors(
            TableName=table,
            IndexName="nope",
            SearchVector=vec(1, 0, 0, 0)["L"],
            TopK=1,
            SearchConditionExpression="user_id = :u",
            ExpressionAttributeValues={":u": {"S": "a"}},
        )
    assert caught.value.response["Error"]["Code"] == "ResourceNotFoundException"


def test_consumed_capacity_reports_vector_bytes(vtable):
    client, table = vtable
    put = client.put_item(TableName=table, Item=item("a", "VEC#1", (1, 0, 0, 0)), ReturnConsumedCapacity="INDEXES")
    written = put["ConsumedCapacity"]["VectorIndexes"]["vectors"]["VectorWriteRequestBytes"]
    assert written > 4 * DIMS
    found = search(client, table, "a", (1, 0, 0, 0), ReturnConsumedCapacity="TOTAL")
    assert found["ConsumedCapacity"]["VectorSearchRequestBytes"] > 4 * DIMS


def test_add_vector_index_backfills_existing_items(server):
    client = local_client(server)
    name = f"v-{uuid.uuid4().hex[:10]}"
    create_table(client, name, vector_dimensions=None)
    try:
        client.put_item(TableName=name, Item=item("a", "VEC#old", (1, 0, 0, 0)))
        assert vector_index_description(client, name) is None
        add_vector_index(client, name, DIMS)
        index = vector_index_description(client, name)
        assert (index["IndexStatus"], index["Backfilling"]) == ("ACTIVE", False)
        assert sks(search(client, name, "a", (1, 0, 0, 0))) == ["VEC#old"]
    finally:
        client.delete_table(TableName=name)


def test_vectors_are_on_disk_with_their_items_across_restarts(tmp_path, no_backoff_sleep):
    name = "chat"
    server = LocalDynamo(tmp_path / "data").start()
    try:
        client = local_client(server)
        create_table(client, name, wait=False, vector_dimensions=DIMS)
        rng = np.random.default_rng(7)
        vectors = {f"VEC#{i}": tuple(float(x) for x in rng.normal(size=DIMS)) for i in range(30)}
        for sk, v in vectors.items():
            client.put_item(TableName=name, Item=item("a", sk, v))
        client.delete_item(TableName=name, Key={"pk": {"S": "USER#a"}, "sk": {"S": "VEC#3"}})
        before = search(client, name, "a", vectors["VEC#5"], top_k=100)
    finally:
        server.stop()
    server = LocalDynamo(tmp_path / "data").start()
    try:
        client = local_client(server)
        after = search(client, name, "a", vectors["VEC#5"], top_k=100)
        assert sks(after) == sks(before) and len(sks(after)) == 29 and sks(after)[0] == "VEC#5"
        assert vector_index_description(client, name)["Dimensions"] == DIMS
        rows = server.disk._read("SELECT count(*) FROM vectors WHERE tbl = ?", (name,))[0][0]
        assert rows == 29
    finally:
        server.stop()


def test_partitions_beyond_the_cache_bound_reload_from_disk_unchanged(tmp_path, no_backoff_sleep, monkeypatch):
    from lib.embedded import vectors

    monkeypatch.setattr(vectors, "CACHE_VECTORS", 3)
    server = LocalDynamo(tmp_path / "data").start()
    try:
        client = local_client(server)
        create_table(client, "chat", wait=False, vector_dimensions=DIMS)
        for user in ("a", "b", "c"):
            for i in range(2):
                client.put_item(TableName="chat", Item=item(user, f"VEC#{i}", (1, i, 0, 0)))
        first = {u: sks(search(client, "chat", u, (1, 0, 0, 0))) for u in ("a", "b", "c")}
        held = [k[2] for k in vectors.STATE._cache if k[0] == "chat"]
        assert len(held) < 3  # a, b, c hold 6 vectors: the oldest partitions were let go
        assert (
            {u: sks(search(client, "chat", u, (1, 0, 0, 0))) for u in ("a", "b", "c")}
            == first
            == {u: ["VEC#0", "VEC#1"] for u in ("a", "b", "c")}
        )
    finally:
        server.stop()


@pytest.mark.parametrize("folder", [False, True], ids=["in-memory", "data-folder"])
def test_searches_between_puts_overwrites_and_deletes_match_a_brute_force_ranking(tmp_path, no_backoff_sleep, folder):
    """The search matrix and filter columns are updated row by row, not rebuilt per write: after any mix of writes
    (searches in between, so both exist when the writes land) a search equals ranking what the table holds now."""
    from lib.embedded import vectors

    rng = np.random.default_rng(7)
    server = LocalDynamo(tmp_path / "data" if folder else None).start()
    try:
        client = local_client(server)
        table = f"churn-{uuid.uuid4().hex[:8]}"
        create_table(client, table, wait=False, vector_dimensions=DIMS)
        held: dict[str, tuple[np.ndarray, str]] = {}  # sk -> (vector as stored, kind), in write order
        tie = rng.normal(size=DIMS).astype(np.float32)
        for step in range(400):
            sk = f"VEC#{int(rng.integers(40)):02d}"
            if rng.random() < 0.3:
                client.delete_item(TableName=table, Key={"pk": {"S": "USER#a"}, "sk": {"S": sk}})
                held.pop(sk, None)
            else:  # a fifth of the puts share one vector: equal scores rank in write order
                vector = tie if rng.random() < 0.2 else rng.normal(size=DIMS).astype(np.float32)
                kind = str(rng.choice(["turn", "memory"]))
                client.put_item(TableName=table, Item=item("a", sk, tuple(float(x) for x in vector), kind=kind))
                held.pop(sk, None)  # a rewrite is a new write: it ranks after the items written before it
                held[sk] = (vector, kind)
            if step % 7:
                continue
            query = rng.normal(size=DIMS)
            for kind in (None, "memory"):
                params = (
                    {} if kind is None else {"condition": "user_id = :u AND kind = :k", "values": {":k": {"S": kind}}}
                )
                answer = search(client, table, "a", tuple(query), top_k=10, **params)
                q = query.astype(np.float32).astype(np.float64)
                expected = sorted(
                    (
                        1
                        - float(v.astype(np.float64) @ q) / (np.linalg.norm(v.astype(np.float64)) * np.linalg.norm(q)),
                        order,
                        s,
                    )
                    for order, (s, (v, k)) in enumerate(held.items())
                    if kind in (None, k)
                )[:10]
                assert sks(answer) == [s for _, _, s in expected], step
                assert [r["Score"] for r in answer["SearchResults"]] == pytest.approx(
                    [d for d, _, _ in expected], abs=1e-5
                )
        part = next(p for k, p in vectors.STATE._cache.items() if k[0] == table and k[2] == "a")
        rows, live = len(part.matrix(DIMS)[0]), len(part.entries)
        assert live == len(held) and rows <= 2 * live + 2 * part._FIRST  # dead rows are squeezed out
    finally:
        server.stop()


class TestOnDemandOnly:
    """DynamoDB keeps vector indexes on on-demand tables only; the embedded server refuses the rest as it does."""

    KEYS = dict(
        AttributeDefinitions=[{"AttributeName": a, "AttributeType": "S"} for a in ("pk", "sk")],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
    )
    THROUGHPUT = {"ReadCapacityUnits": 5, "WriteCapacityUnits": 5}

    @staticmethod
    def refused(call: Any, **params: Any) -> str:
        with pytest.raises(ClientError) as caught:
            call(**params)
        assert caught.value.response["Error"]["Code"] == "ValidationException"
        return caught.value.response["Error"]["Message"]

    @pytest.mark.parametrize("billing", [{}, {"BillingMode": "PROVISIONED"}])
    def test_a_provisioned_table_with_a_vector_index_is_not_made(self, server, billing):
        client = local_client(server)
        name = f"v-{uuid.uuid4().hex[:10]}"
        message = self.refused(
            client.create_table,
            TableName=name,
            ProvisionedThroughput=self.THROUGHPUT,
            VectorIndexes=[vector_index(DIMS)],
            **billing,
            **{**self.KEYS, "AttributeDefinitions": self.KEYS["AttributeDefinitions"] + VECTOR_ATTRIBUTE_DEFINITIONS},
        )
        assert "on-demand" in message and "PAY_PER_REQUEST" in message
        assert not table_exists(client, name)

    def test_a_vector_index_is_not_added_to_a_provisioned_table(self, server):
        client = local_client(server)
        name = f"v-{uuid.uuid4().hex[:10]}"
        client.create_table(TableName=name, ProvisionedThroughput=self.THROUGHPUT, **self.KEYS)
        try:
            message = self.refused(add_vector_index, client=client, table_name=name, dimensions=DIMS)
            assert "on-demand" in message
            assert vector_index_description(client, name) is None
        finally:
            client.delete_table(TableName=name)

    def test_a_table_with_a_vector_index_stays_on_demand(self, vtable):
        client, table = vtable
        message = self.refused(
            client.update_table, TableName=table, BillingMode="PROVISIONED", ProvisionedThroughput=self.THROUGHPUT
        )
        assert "on-demand" in message
        described = client.describe_table(TableName=table)["Table"]
        assert described["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
        assert vector_index_description(client, table)["IndexStatus"] == "ACTIVE"


class TestSearchAnswer:
    """A search sends each entry's stored JSON as it is, and sizes an entry for the consumed bytes only once."""

    def test_text_of_every_kind_comes_back_as_written(self, vtable):
        client, table = vtable
        text = 'héllo \u2028 "quoted" \\ ✓ 中文 👋'
        client.put_item(TableName=table, Item={**item("a", "VEC#1", (1, 0, 0, 0)), "text": {"S": text}})
        found = search(client, table, "a", (1, 0, 0, 0), ReturnConsumedCapacity="TOTAL")
        assert found["SearchResults"][0]["Item"]["text"] == {"S": text}
        assert found["SearchResults"][0]["Score"] == pytest.approx(0.0)

    def test_each_entry_is_sized_once_however_often_it_is_found(self, vtable, monkeypatch):
        from lib.embedded import vectors

        client, table = vtable
        for i in range(5):
            client.put_item(TableName=table, Item=item("a", f"VEC#{i}", (1, i, 0, 0)))
        sized = []
        original = vectors.item_size
        monkeypatch.setattr(vectors, "item_size", lambda attrs: sized.append(1) or original(attrs))
        first = search(client, table, "a", (1, 0, 0, 0), ReturnConsumedCapacity="TOTAL")
        assert len(sized) == 5
        again = search(client, table, "a", (1, 0, 0, 0), ReturnConsumedCapacity="TOTAL")
        assert len(sized) == 5 and again["ConsumedCapacity"] == first["ConsumedCapacity"]
        client.put_item(TableName=table, Item={**item("a", "VEC#0", (1, 0, 0, 0)), "text": {"S": "longer " * 50}})
        grown = search(client, table, "a", (1, 0, 0, 0), ReturnConsumedCapacity="TOTAL")
        assert len(sized) == 5 + 1 + 1  # the write sized its entry; the search sized the rewritten one once
        assert (
            grown["ConsumedCapacity"]["VectorSearchRequestBytes"]
            > first["ConsumedCapacity"]["VectorSearchRequestBytes"]
        )
