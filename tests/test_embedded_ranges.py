"""A Query on the embedded server costs what its sort-key range reads, not what its partition holds: it bisects to
the range's bounds, and a table on disk reads that range from SQLite and builds moto Items only for what a request
touches. Every page is moto's own answer (lib/embedded/ranges.py states the one difference, past the range)."""

from __future__ import annotations

import uuid
from collections import defaultdict
from typing import Any, Iterator

import pytest

from lib.database import local_client
from lib.embedded import partitions
from lib.embedded.server import moto_backend
from lib.storage import keys
from lib.storage.schema import create_table
from lib.storage.store import to_item
from tests.test_embedded_disk import Folder

USER = "USER#a"
VECTORS = 600  # a user's vector items: what a sidebar or memory Query must not pay for


def user_items(vectors: int) -> Iterator[dict]:
    """One user's partition as the app fills it (memories, a preference, sidebar rows, vector items), with a few
    large items so that pages end at 1 MB, and two neighbouring partitions."""
    for i in range(4):
        yield {"pk": USER, "sk": f"BIG#{i}", "body": "b" * 300_000}
    for i in range(5):
        yield {"pk": USER, "sk": f"MEM#{i:02d}", "text": f"fact {i}"}
    yield {"pk": USER, "sk": "PREF#memory", "enabled": True}
    for i in range(25):
        yield {"pk": USER, "sk": f"SES#2026-01-{i + 1:02d}T00:00:00.000Z#{i:026d}", "title": f"chat {i}"}
    for i in range(vectors):
        yield {"pk": USER, "sk": f"VEC#{i:05d}", "kind": "turn", "snippet": "s" * (50 + i % 7)}
    yield {"pk": "USER#a#SES#1", "sk": "SES#META", "title": "a chat"}
    yield {"pk": "USER#b", "sk": "SES#2026-01-01T00:00:00.000Z#" + "0" * 26, "title": "another user"}


def fill(client: Any, table: str, vectors: int = VECTORS) -> None:
    batch = [{"PutRequest": {"Item": to_item(item)}} for item in user_items(vectors)]
    for start in range(0, len(batch), 25):
        client.batch_write_item(RequestItems={table: batch[start : start + 25]})


def pages(client: Any, table: str, params: dict) -> list[dict]:
    """Every page of a Query, following LastEvaluatedKey: (Items, Count, ScannedCount, LastEvaluatedKey)."""
    out, start = [], None
    while True:
        request = {"TableName": table, **params, **({"ExclusiveStartKey": start} if start else {})}
        page = client.query(**request)
        out.append({k: page.get(k) for k in ("Items", "Count", "ScannedCount", "LastEvaluatedKey")})
        start = page.get("LastEvaluatedKey")
        if not start:
            return out


def same_as_moto(ours: list[dict], moto: list[dict]) -> bool:
    """Equal pages; or moto's walk past the range ended the last page early (a later item would not fit in its
    1 MB), which only adds a LastEvaluatedKey and an empty page after it (lib/embedded/ranges.py)."""
    if ours == moto:
        return True
    *same, last = ours
    return (
        len(moto) == len(ours) + 1
        and moto[: len(same)] == same
        and moto[-2] == {**last, "LastEvaluatedKey": moto[-2]["LastEvaluatedKey"]}
        and moto[-2]["LastEvaluatedKey"] is not None
        and last["LastEvaluatedKey"] is None
        and moto[-1] == {"Items": [], "Count": 0, "ScannedCount": 0, "LastEvaluatedKey": None}
    )


CONDITIONS = [
    ("", {}),
    ("AND sk = :a", {":a": "SES#2026-01-07T00:00:00.000Z#" + "6".zfill(26)}),
    ("AND sk = :a", {":a": "SES#missing"}),
    ("AND sk < :a", {":a": "MEM#03"}),
    ("AND sk <= :a", {":a": "MEM#03"}),
    ("AND sk > :a", {":a": "SES#2026-01-20"}),
    ("AND sk >= :a", {":a": "VEC#00025"}),
    ("AND sk BETWEEN :a AND :b", {":a": keys.MEMORY_PREFIX, ":b": keys.PREFERENCE_PREFIX + "~"}),
    ("AND sk BETWEEN :a AND :b", {":a": "BIG#1", ":b": "MEM#01"}),
    ("AND sk BETWEEN :a AND :b", {":a": "SES#", ":b": "SES#"}),
    ("AND sk BETWEEN :a AND :b", {":a": "VEC#", ":b": "MEM#"}),  # low above high: nothing
    ("AND begins_with(sk, :a)", {":a": keys.SESSION_PREFIX}),
    ("AND begins_with(sk, :a)", {":a": "BIG#"}),
    ("AND begins_with(sk, :a)", {":a": "VEC#0001"}),
    ("AND begins_with(sk, :a)", {":a": "ZZZ"}),
]


@pytest.fixture(scope="module")
def tables(server, tmp_path_factory) -> Iterator[tuple[Any, str, str, Folder]]:
    """The same items three times: `reference` answered by moto's own Query (plain partitions), `memory` by the
    bisecting Query on an in-memory table, and a table on disk (restarted before each test)."""
    client = local_client(server)
    reference, memory = f"ref-{uuid.uuid4().hex[:8]}", f"mem-{uuid.uuid4().hex[:8]}"
    for name in (reference, memory):
        create_table(client, name, vector_dimensions=None)
        fill(client, name, 30)
    moto_table = moto_backend("us-east-1").tables[reference]
    moto_table.items = defaultdict(dict, {h: dict(p) for h, p in dict.items(moto_table.items)})
    folder = Folder(tmp_path_factory.mktemp("ranges") / "data").start()
    fill(folder.client, folder.table, 30)
    yield client, reference, memory, folder
    folder.stop()
    for name in (reference, memory):
        client.delete_table(TableName=name)


class TestEveryPageIsMotos:
    @pytest.mark.parametrize("condition, values", CONDITIONS)
    def test_every_range_direction_and_limit_pages_as_moto_does(self, tables, condition, values):
        client, reference, memory, folder = tables
        folder.restart()
        for forward in (True, False):
            for limit in (1, 2, 7, None):
                params = {
                    "KeyConditionExpression": f"pk = :pk {condition}",
                    "ExpressionAttributeValues": to_item({":pk": USER, **values}),
                    "ScanIndexForward": forward,
                    "ConsistentRead": True,
                    **({"Limit": limit} if limit else {}),
                }
                moto = pages(client, reference, params)
                case = (condition, values, forward, limit)
                assert same_as_moto(pages(client, memory, params), moto), case
                assert same_as_moto(pages(folder.client, folder.table, params), moto), case

    def test_filters_and_projections_apply_to_the_page_as_moto_applies_them(self, tables):
        client, reference, memory, folder = tables
        folder.restart()
        params = {
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :a AND :b",
            "FilterExpression": "contains(#t, :one)",
            "ProjectionExpression": "sk, #t",
            "ExpressionAttributeNames": {"#t": "title"},
            "ExpressionAttributeValues": to_item({":pk": USER, ":a": "SES#", ":b": "VEC#00010", ":one": "1"}),
            "Limit": 6,
        }
        moto = pages(client, reference, params)
        assert any(page["Count"] < page["ScannedCount"] for page in moto)  # the filter left some out
        assert pages(client, memory, params) == moto
        assert pages(folder.client, folder.table, params) == moto

    def test_a_partition_that_does_not_exist_is_one_empty_page(self, tables):
        client, reference, memory, folder = tables
        params = {"KeyConditionExpression": "pk = :pk", "ExpressionAttributeValues": to_item({":pk": "USER#none"})}
        empty = [{"Items": [], "Count": 0, "ScannedCount": 0, "LastEvaluatedKey": None}]
        assert pages(client, reference, params) == empty
        assert pages(client, memory, params) == empty
        assert pages(folder.client, folder.table, params) == empty


@pytest.fixture
def crowded(tmp_path, no_backoff_sleep) -> Iterator[Folder]:
    """A folder whose user has sidebar rows, memories and VECTORS vector items, restarted: nothing in memory."""
    folder = Folder(tmp_path / "data").start()
    fill(folder.client, folder.table)
    folder.restart()
    yield folder
    folder.stop()


class Reads:
    """What one request cost the disk: SQLite rows read and moto Items built from them."""

    def __init__(self, folder: Folder):
        self.disk = folder.server.disk
        self.rows, self.built = self.disk.rows_read, partitions.Loads.built

    def __call__(self) -> tuple[int, int]:
        return self.disk.rows_read - self.rows, partitions.Loads.built - self.built


class TestCostFollowsTheRange:
    def test_the_first_sidebar_query_after_a_restart_reads_its_page_not_the_vectors(self, crowded):
        reads = Reads(crowded)
        page = crowded.client.query(
            TableName=crowded.table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
            ExpressionAttributeValues=to_item({":pk": USER, ":p": keys.SESSION_PREFIX}),
            ScanIndexForward=False,
            Limit=20,
            ConsistentRead=True,
        )
        assert [i["title"]["S"] for i in page["Items"]] == [f"chat {i}" for i in range(24, 4, -1)]
        rows, built = reads()
        assert built == 20  # the page, and only the page, became moto Items
        assert rows <= 21 + 1  # the page, the next row (moto's Limit rule), nothing of the 600 vector items

    def test_the_memory_query_reads_only_memories_and_preferences(self, crowded):
        reads = Reads(crowded)
        pk, low, high = USER, keys.MEMORY_PREFIX, keys.PREFERENCE_PREFIX + "~"
        page = crowded.client.query(
            TableName=crowded.table,
            KeyConditionExpression="pk = :pk AND sk BETWEEN :low AND :high",
            ExpressionAttributeValues=to_item({":pk": pk, ":low": low, ":high": high}),
            ConsistentRead=True,
        )
        assert [i["sk"]["S"] for i in page["Items"]] == [f"MEM#{i:02d}" for i in range(5)] + ["PREF#memory"]
        assert reads() == (6, 6)

    def test_an_empty_range_reads_no_item(self, crowded):
        reads = Reads(crowded)
        page = crowded.client.query(
            TableName=crowded.table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
            ExpressionAttributeValues=to_item({":pk": USER, ":p": "PURGE#"}),
        )
        assert page["Items"] == [] and reads() == (0, 0)

    def test_a_get_item_after_a_restart_reads_one_row(self, crowded):
        reads = Reads(crowded)
        assert crowded.get(USER, "VEC#00042")["snippet"] == {"S": "s" * 50}
        assert reads() == (1, 1)
        crowded.get(USER, "VEC#00042")
        assert reads() == (1, 1)  # built once, then served from memory

    def test_a_page_of_vectors_builds_its_page_and_the_next_page_goes_on_from_there(self, crowded):
        reads = Reads(crowded)
        params = dict(
            TableName=crowded.table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
            ExpressionAttributeValues=to_item({":pk": USER, ":p": keys.VECTOR_PREFIX}),
            Limit=100,
        )
        first = crowded.client.query(**params)
        second = crowded.client.query(**params, ExclusiveStartKey=first["LastEvaluatedKey"])
        assert [i["sk"]["S"] for i in first["Items"] + second["Items"]] == [f"VEC#{i:05d}" for i in range(200)]
        assert reads()[1] == 200


class TestWritesOnAPartlyReadPartition:
    """Memory holds what requests touched; SQLite the rest. Writes, deletes and undone transactions stay exact."""

    def sks(self, folder: Folder, prefix: str, **params: Any) -> list[str]:
        out, start = [], None
        while True:
            page = folder.client.query(
                TableName=folder.table,
                KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
                ExpressionAttributeValues=to_item({":pk": USER, ":p": prefix}),
                **params,
                **({"ExclusiveStartKey": start} if start else {}),
            )
            out += [i["sk"]["S"] for i in page["Items"]]
            start = page.get("LastEvaluatedKey")
            if not start:
                return out

    def test_puts_and_deletes_of_unread_items_show_in_the_next_query_and_after_a_restart(self, crowded):
        crowded.put(USER, "MEM#02a", text="new")
        crowded.client.delete_item(TableName=crowded.table, Key=to_item({"pk": USER, "sk": "MEM#03"}))
        deleted = crowded.client.delete_item(
            TableName=crowded.table, Key=to_item({"pk": USER, "sk": "MEM#04"}), ReturnValues="ALL_OLD"
        )
        assert deleted["Attributes"]["text"] == {"S": "fact 4"}  # read from disk to be returned
        expected = ["MEM#00", "MEM#01", "MEM#02", "MEM#02a"]
        assert self.sks(crowded, "MEM#", Limit=2) == expected
        assert self.sks(crowded, "MEM#", ScanIndexForward=False) == expected[::-1]
        crowded.restart()
        assert self.sks(crowded, "MEM#") == expected

    def test_a_cancelled_transaction_on_unread_items_changes_nothing(self, crowded):
        from botocore.exceptions import ClientError

        with pytest.raises(ClientError, match="TransactionCanceled"):
            crowded.client.transact_write_items(
                TransactItems=[
                    {"Delete": {"TableName": crowded.table, "Key": to_item({"pk": USER, "sk": "MEM#01"})}},
                    {"Put": {"TableName": crowded.table, "Item": to_item({"pk": USER, "sk": "MEM#01b"})}},
                    {
                        "ConditionCheck": {
                            "TableName": crowded.table,
                            "Key": to_item({"pk": USER, "sk": "MEM#02"}),
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                ]
            )
        assert self.sks(crowded, "MEM#") == [f"MEM#{i:02d}" for i in range(5)]
        crowded.restart()
        assert self.sks(crowded, "MEM#") == [f"MEM#{i:02d}" for i in range(5)]

    def test_a_scan_with_a_legacy_filter_reads_every_partition_whole(self, crowded):
        count, start = 0, None
        while True:
            page = crowded.client.scan(
                TableName=crowded.table,
                ScanFilter={"kind": {"AttributeValueList": [{"S": "turn"}], "ComparisonOperator": "EQ"}},
                **({"ExclusiveStartKey": start} if start else {}),
            )
            count += page["Count"]
            start = page.get("LastEvaluatedKey")
            if not start:
                break
        assert count == VECTORS

    def test_memory_stays_within_its_bound_counting_the_items_read(self, crowded, monkeypatch):
        monkeypatch.setattr(partitions.LazyPartitions.trim, "__defaults__", (150,))
        assert len(self.sks(crowded, "VEC#")) == VECTORS
        held = sum(len(p) for p in dict.values(crowded.moto_table.items))
        assert held == VECTORS  # the newest partition stays whole, as before
        crowded.get("USER#b", "SES#2026-01-01T00:00:00.000Z#" + "0" * 26)
        assert [k.value for k in dict.keys(crowded.moto_table.items)] == ["USER#b"]
