"""Fixtures: one embedded moto server per test run, a fresh real table per test, request counting by event hooks."""

from __future__ import annotations

import socket
import uuid
from typing import Any

import pytest

from lib.database import local_client, local_server
from lib.storage.capacity import Meter
from lib.storage.schema import create_table
from lib.storage.store import ChatStore
from tests.fake_anthropic import FakeAnthropic


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
def no_network(monkeypatch) -> None:
    """Every outbound connection fails: what is loaded must come from the installed packages' files."""

    def refuse(*args, **kwargs):
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


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


@pytest.fixture
def no_backoff_sleep(monkeypatch):
    """botocore retries as configured; only the waiting between attempts is skipped, to keep the suite fast."""
    import botocore.retries.adaptive as adaptive
    import botocore.retries.standard as standard

    monkeypatch.setattr(standard.ExponentialBackoff, "delay_amount", lambda self, context: 0)
    monkeypatch.setattr(adaptive.ClientRateLimiter, "on_sending_request", lambda self, request, **kwargs: None)


@pytest.fixture
def app_env(monkeypatch, server):
    """The pages run on a fresh table of the embedded server, in memory, with an instant demo model."""
    monkeypatch.setenv("CHAT_TABLE", f"app-{uuid.uuid4().hex[:10]}")
    monkeypatch.setenv("CHAT_DATA_DIR", ":memory:")
    monkeypatch.setenv("CHAT_DEMO_DELAY", "0")


@pytest.fixture
def fake_model(monkeypatch):
    """The anthropic provider, pointed at a local server that speaks the Anthropic streaming protocol."""
    fake = FakeAnthropic()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    monkeypatch.setenv("CHAT_ANTHROPIC_BASE_URL", fake.url)
    monkeypatch.setenv("CHAT_MODEL_MAX_RETRIES", "0")
    yield fake
    fake.close()
