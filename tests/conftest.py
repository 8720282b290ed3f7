"""Fixtures: one embedded moto server per test run, a fresh real table per test, request counting by event hooks."""
from __future__ import annotations

import uuid
from typing import Any

import pytest

from lib.capacity import Meter
from lib.database import local_client, local_server
from lib.schema import create_table
from lib.store import ChatStore


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No setting leaks in from the developer's shell; no real AWS credentials are ever used."""
    import os

    for name in list(os.environ):
        if name.startswith(("CHAT_", "AWS_", "ANTHROPIC_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


@pytest.fixture(scope="session")
def server():
    """The embedded DynamoDB (moto, serialized, in memory) shared by all tests; tables are per test."""
    return local_server(None, "us-east-1")


class Requests:
    """Every DynamoDB call a client makes, counted with botocore's before-call event."""

    def __init__(self, client: Any):
        self.calls: list[tuple[str, dict]] = []
        client.meta.events.register("before-parameter-build.dynamodb", self._record)

    def _record(self, params: dict, model: Any, **_: Any) -> None:
        self.calls.append((model.name, params))

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def reset(self) -> None:
        self.calls.clear()


@pytest.fixture
def table(server) -> str:
    name = f"chat-{uuid.uuid4().hex[:12]}"
    client = local_client(server)
    create_table(client, name)
    yield name
    client.delete_table(TableName=name)


@pytest.fixture
def meter() -> Meter:
    return Meter(trust_reported=False)


@pytest.fixture
def client(server, meter):
    return meter.install(local_client(server))


@pytest.fixture
def requests(client) -> Requests:
    return Requests(client)


@pytest.fixture
def store(client, table, meter) -> ChatStore:
    return ChatStore(client, table, meter, cursor_secret="test-secret")
