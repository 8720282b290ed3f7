"""The one table: primary key (pk, sk) strings, no indexes, no streams."""
from __future__ import annotations

from typing import Any

TTL_ATTRIBUTE = "expire_at"  # optional retention: items carrying it expire (epoch seconds)


def create_table(client: Any, table_name: str, *, wait: bool = True) -> None:
    """Create the chat table on demand (PAY_PER_REQUEST); the caller turns on AWS-only extras."""
    client.create_table(
        TableName=table_name,
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    if wait:
        client.get_waiter("table_exists").wait(TableName=table_name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})


def table_exists(client: Any, table_name: str) -> bool:
    try:
        client.describe_table(TableName=table_name)
    except client.exceptions.ResourceNotFoundException:
        return False
    return True
