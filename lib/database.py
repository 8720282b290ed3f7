"""Opens the configured DynamoDB: the embedded local server, or the real table on AWS. Never one for the other."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

from lib.storage.capacity import Meter
from lib.config import Settings
from lib.errors import ConfigError, StoreUnavailable
from lib.embedded.server import LocalDynamo
from lib.storage.schema import add_vector_index, create_table, table_exists, vector_index_description
from lib.storage.store import ChatStore

# Throttles and transient errors are retried by botocore before the store sees them. Every request has a
# deadline: DynamoDB answers in milliseconds (a 1 MB Query page well under a second), so a response that
# takes 10 s is a hung endpoint; with 5 attempts one is reported after about 50 s, not 150 s.
RETRIES = Config(retries={"mode": "adaptive", "total_max_attempts": 5}, connect_timeout=3, read_timeout=10)
# The embedded server runs in this process: it cannot hang on a network, but some of its answers are
# legitimately slow on a big local table (adding the vector index backfills it before answering).
LOCAL_RETRIES = Config(retries={"mode": "adaptive", "total_max_attempts": 5}, connect_timeout=5, read_timeout=30)

MEMORY = ":memory:"  # CHAT_DATA_DIR value for a local database that is not saved

# moto's backend is process-wide, so is the server that serves it: one per data folder.
_local_servers: dict[str | None, LocalDynamo] = {}
_local_lock = threading.Lock()


@dataclass(frozen=True)
class Database:
    """A ready table: its client (metered), name, meter, and a sentence saying where the data lives."""

    client: Any
    table: str
    meter: Meter
    where: str
    local: bool

    def store(self, cursor_secret: str | None = None) -> ChatStore:
        return ChatStore(self.client, self.table, self.meter, cursor_secret=cursor_secret or None)


def local_server(data_dir: str | None, region: str) -> LocalDynamo:
    """The process's embedded DynamoDB for `data_dir`, started on first use. A start that fails (a damaged, locked
    or unwritable folder) raises StoreUnavailable/ConfigError and leaves nothing behind: the next call tries
    again, so no page is ever served by a half-started database."""
    with _local_lock:
        server = _local_servers.get(data_dir)
        if server is None:
            server = LocalDynamo(data_dir, region).start()
            _local_servers[data_dir] = server
        return server


def stop_local_server(data_dir: str | None) -> None:
    """Stop the process's server for `data_dir` (if any) and release its folder (tests, admin restore)."""
    with _local_lock:
        server = _local_servers.pop(data_dir, None)
    if server is not None:
        server.stop()


def local_client(server: LocalDynamo) -> Any:
    return boto3.session.Session().client("dynamodb", region_name=server.region, endpoint_url=server.endpoint_url,
                        aws_access_key_id="local", aws_secret_access_key="local", config=LOCAL_RETRIES)


def open_database(settings: Settings) -> Database:
    """Connect as configured; ConfigError or StoreUnavailable says what is wrong and how to fix it."""
    meter = Meter(trust_reported=settings.backend == "aws")
    if settings.backend == "local":
        data_dir = None if settings.data_dir == MEMORY else settings.data_dir
        server = local_server(data_dir, settings.region)
        client = meter.install(local_client(server))
        with _local_lock:
            if not table_exists(client, settings.table):  # tables on disk were made again by the server's start
                create_table(client, settings.table, vector_dimensions=settings.embed_dimensions)
            elif vector_index_description(client, settings.table) is None:  # made before search existed
                add_vector_index(client, settings.table, settings.embed_dimensions)  # backfilled before it returns
        where = (f"local embedded DynamoDB, saved in {data_dir}/" if data_dir
                 else "local embedded DynamoDB, in memory only (lost when the app stops)")
        return Database(client, settings.table, meter, where, local=True)

    try:
        client = boto3.session.Session().client("dynamodb", region_name=settings.region,
                              endpoint_url=settings.dynamodb_endpoint or None, config=RETRIES)
        if not table_exists(client, settings.table):
            raise ConfigError(
                f"CHAT_BACKEND=aws, but table '{settings.table}' does not exist in {settings.region}. "
                f"Create it with: python -m lib.admin create-table"
            )
    except (NoCredentialsError, NoRegionError) as exc:
        raise ConfigError(
            "CHAT_BACKEND=aws, but no AWS credentials were found. Configure them (an instance role, "
            "AWS_PROFILE, or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY), or unset CHAT_BACKEND for the local demo."
        ) from exc
    except ClientError as exc:
        raise ConfigError(f"CHAT_BACKEND=aws, but DynamoDB refused us: {exc}") from exc
    except BotoCoreError as exc:
        raise StoreUnavailable(f"CHAT_BACKEND=aws, but DynamoDB in {settings.region} cannot be reached: {exc}") from exc
    meter.install(client)
    return Database(client, settings.table, meter, f"DynamoDB table '{settings.table}' in {settings.region}", local=False)
