"""The one table: primary key (pk, sk) strings, no secondary indexes, no streams; one vector index (seed 004).

The vector index `vectors` indexes the `embedding` attribute (a list of numbers) of any item carrying it, by
`user_id` (HASH: every search names one user) with `kind` (turn, memory) and `session_id` (the chat a turn's
vector belongs to) as inline filters: recall in a chat asks for that chat's nearest turns, not the user's nearest
of which some are the chat's. An item without `user_id` is written but never indexed (seed 004), so every vector
item carries it.
"""

from __future__ import annotations

from typing import Any

TTL_ATTRIBUTE = "expire_at"  # optional retention: items carrying it expire (epoch seconds)
VECTOR_INDEX = "vectors"
VECTOR_ATTRIBUTE, USER_ATTRIBUTE, KIND_ATTRIBUTE = "embedding", "user_id", "kind"
CHAT_ATTRIBUTE = "session_id"
DEFAULT_DIMENSIONS = 256  # the tests' and benches' tables (wordllama's size); the app passes CHAT_EMBED_DIMENSIONS


def vector_index(dimensions: int) -> dict:
    """The vector index definition (CreateTable VectorIndexes / UpdateTable VectorIndexUpdates Create)."""
    return {
        "IndexName": VECTOR_INDEX,
        "VectorAttribute": {"AttributeName": VECTOR_ATTRIBUTE},
        "SearchSchema": [
            {"AttributeName": USER_ATTRIBUTE, "SearchSchemaElementType": "HASH"},
            {"AttributeName": KIND_ATTRIBUTE, "SearchSchemaElementType": "INLINE_FILTER"},
            {"AttributeName": CHAT_ATTRIBUTE, "SearchSchemaElementType": "INLINE_FILTER"},
        ],
        "Projection": {"ProjectionType": "ALL"},
        "Dimensions": dimensions,
        "DistanceFunction": "COSINE",
    }


VECTOR_ATTRIBUTE_DEFINITIONS = [
    {"AttributeName": USER_ATTRIBUTE, "AttributeType": "S"},
    {"AttributeName": KIND_ATTRIBUTE, "AttributeType": "S"},
    {"AttributeName": CHAT_ATTRIBUTE, "AttributeType": "S"},
]


def create_table(
    client: Any, table_name: str, *, wait: bool = True, vector_dimensions: int | None = DEFAULT_DIMENSIONS
) -> None:
    """Create the chat table on demand (PAY_PER_REQUEST) with its vector index (None: without); the caller turns
    on AWS-only extras."""
    extra = {"VectorIndexes": [vector_index(vector_dimensions)]} if vector_dimensions else {}
    client.create_table(
        TableName=table_name,
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ]
        + (VECTOR_ATTRIBUTE_DEFINITIONS if vector_dimensions else []),
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        BillingMode="PAY_PER_REQUEST",
        **extra,
    )
    if wait:
        client.get_waiter("table_exists").wait(TableName=table_name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})


def ensure_ttl(client: Any, table_name: str) -> bool:
    """Turn on TTL on `expire_at` if it is off (1 DescribeTimeToLive, and 1 UpdateTimeToLive the first time);
    True if it had to. The embedded database keeps the rule itself (lib/embedded/server.py LocalDynamo)."""
    described = client.describe_time_to_live(TableName=table_name).get("TimeToLiveDescription", {})
    if described.get("TimeToLiveStatus") == "ENABLED" and described.get("AttributeName") == TTL_ATTRIBUTE:
        return False
    client.update_time_to_live(
        TableName=table_name, TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE}
    )
    return True


def create_aws_table(client: Any, table_name: str, *, vector_dimensions: int | None = DEFAULT_DIMENSIONS) -> None:
    """Create the table for AWS: as `create_table` (waited on), then the TTL attribute, point-in-time recovery and
    deletion protection (which the embedded server does not need)."""
    create_table(client, table_name, vector_dimensions=vector_dimensions)
    client.update_time_to_live(
        TableName=table_name, TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE}
    )
    client.update_continuous_backups(
        TableName=table_name, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True}
    )
    client.update_table(TableName=table_name, DeletionProtectionEnabled=True)


def table_exists(client: Any, table_name: str) -> bool:
    try:
        client.describe_table(TableName=table_name)
    except client.exceptions.ResourceNotFoundException:
        return False
    return True


def vector_index_description(client: Any, table_name: str) -> dict | None:
    """The table's chat vector index as DescribeTable shows it (IndexStatus, Backfilling, Dimensions), or None."""
    table = client.describe_table(TableName=table_name)["Table"]
    return next((i for i in table.get("VectorIndexes", []) if i["IndexName"] == VECTOR_INDEX), None)


def filters_by_chat(description: dict | None) -> bool:
    """Whether a vector index (as `vector_index_description` gives it) can filter a search to one chat. An index
    made before the filter existed cannot, and a vector index cannot be changed, only made again
    (`python -m lib.admin add-vector-index --rebuild`)."""
    schema = (description or {}).get("SearchSchema") or []
    return any(
        e.get("AttributeName") == CHAT_ATTRIBUTE and e.get("SearchSchemaElementType") == "INLINE_FILTER" for e in schema
    )


def delete_vector_index(client: Any, table_name: str) -> None:
    """Start deleting the vector index (UpdateTable); the items and their vectors stay, searches fail until an
    index is made again."""
    client.update_table(TableName=table_name, VectorIndexUpdates=[{"Delete": {"IndexName": VECTOR_INDEX}}])


def add_vector_index(client: Any, table_name: str, dimensions: int) -> None:
    """Start adding the vector index to an existing table (UpdateTable); wait with `vector_index_description`."""
    client.update_table(
        TableName=table_name,
        AttributeDefinitions=VECTOR_ATTRIBUTE_DEFINITIONS,
        VectorIndexUpdates=[{"Create": vector_index(dimensions)}],
    )
