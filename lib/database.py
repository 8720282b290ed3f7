"""Opens the configured DynamoDB: the embedded local server, or the real table on AWS. Never one for the other."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    NoRegionError,
)

from lib import aws, logs
from lib.config import Settings
from lib.embedded.server import LocalDynamo
from lib.errors import ConfigError, StoreUnavailable
from lib.storage.capacity import Meter
from lib.storage.objects import MemoryObjects, ObjectStore, S3Objects
from lib.storage.schema import (
    add_vector_index,
    create_aws_table,
    create_table,
    delete_vector_index,
    ensure_ttl,
    filters_by_chat,
    table_exists,
    vector_index_description,
)
from lib.storage.store import ChatStore

# Throttles and transient errors are retried by botocore before the store sees them. Every request has a
# deadline: DynamoDB answers in milliseconds (a 1 MB Query page well under a second), so a response that
# takes 10 s is a hung endpoint; with 5 attempts one is reported after about 50 s, not 150 s.
RETRIES = aws.deadlines(connect_s=3, read_s=10, attempts=5, mode="adaptive")
# The embedded server runs in this process: it cannot hang on a network, but some of its answers are
# legitimately slow on a big local table (adding the vector index backfills it before answering).
LOCAL_RETRIES = aws.deadlines(connect_s=5, read_s=30, attempts=5, mode="adaptive")

MEMORY = ":memory:"  # CHAT_DATA_DIR value for a local database that is not saved

# The embedded object stores, one per folder (None: in memory), as the servers are one per data folder.
_local_objects: dict[str | None, object] = {}

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
    created: bool = False  # create_aws_database made the table just now
    objects: ObjectStore | None = None  # long bodies (docs/objects.md); None: every turn inline, 396 KB at most
    max_question_bytes: int = 2 * 1024 * 1024

    def store(self, cursor_secret: str | None = None) -> ChatStore:
        return ChatStore(
            self.client,
            self.table,
            self.meter,
            cursor_secret=cursor_secret or None,
            objects=self.objects,
            max_question_bytes=self.max_question_bytes,
        )


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


def local_objects(settings: Settings, data_dir: str | None) -> Any:
    """The embedded object store: CHAT_OBJECTS_DIR, else objects/ beside the database; in memory with :memory:."""
    from lib.embedded.objects import FolderObjects

    folder = settings.objects_dir or (str(Path(data_dir) / "objects") if data_dir else None)
    with _local_lock:
        backend = _local_objects.get(folder)
        if backend is None:
            backend = FolderObjects(folder) if folder else MemoryObjects()
            _local_objects[folder] = backend
        return backend


def aws_objects(settings: Settings, meter: Meter) -> ObjectStore | None:
    """The bucket of long bodies (CHAT_BUCKET) through an S3 client with DynamoDB's deadlines; None when unset."""
    if not settings.bucket:
        return None
    endpoint = settings.bucket_endpoint or None
    client = aws.client(
        "s3", region=settings.region, endpoint_url=endpoint, config=aws.s3_config(RETRIES, endpoint_url=endpoint)
    )
    return ObjectStore(S3Objects(client, settings.bucket), meter)


def local_client(server: LocalDynamo) -> Any:
    return aws.client(
        "dynamodb",
        region=server.region,
        endpoint_url=server.endpoint_url,
        access_key="local",
        secret_key="local",
        config=LOCAL_RETRIES,
    )


def open_database(settings: Settings) -> Database:
    """Connect as configured; ConfigError or StoreUnavailable says what is wrong and how to fix it.

    The local backend makes its table when it is missing; on AWS a missing table is a ConfigError naming the
    command that creates it (`create_aws_database`)."""
    if settings.backend == "local":
        meter = Meter(trust_reported=False)
        data_dir = None if settings.data_dir == MEMORY else settings.data_dir
        server = local_server(data_dir, settings.region)
        client = meter.install(local_client(server))
        with _local_lock:
            if not table_exists(client, settings.table):  # tables on disk were made again by the server's start
                create_table(client, settings.table, vector_dimensions=settings.embed_dimensions)
            else:
                index = vector_index_description(client, settings.table)
                if index is None:  # made before search existed
                    add_vector_index(client, settings.table, settings.embed_dimensions)  # backfilled on return
                elif not filters_by_chat(index) or index.get("Dimensions") != settings.embed_dimensions:
                    # Made before the chat filter, or for another local model's size (CHAT_EMBED_MODEL changed): a
                    # vector index cannot be changed, so it is made again for this embedder. Vectors of the other
                    # size stay on their items, out of the index, until `reindex` embeds them again.
                    resized = index.get("Dimensions") != settings.embed_dimensions
                    logs.event(
                        "vector_index.rebuilt",
                        table=settings.table,
                        reason="dimensions" if resized else "no chat filter",
                        dimensions=settings.embed_dimensions,
                        **({"fix": "python -m lib.admin reindex"} if resized else {}),
                    )
                    delete_vector_index(client, settings.table)
                    add_vector_index(client, settings.table, settings.embed_dimensions)
            ensure_ttl(client, settings.table)  # temporary chats and audit records expire offline too
        where = (
            f"local embedded DynamoDB, saved in {data_dir}/"
            if data_dir
            else "local embedded DynamoDB, in memory only (lost when the app stops)"
        )
        objects = ObjectStore(local_objects(settings, data_dir), meter)
        return Database(
            client,
            settings.table,
            meter,
            where,
            local=True,
            objects=objects,
            max_question_bytes=settings.max_question_bytes,
        )

    with _aws_errors(settings):
        client = _aws_client(settings)
        if not table_exists(client, settings.table):
            raise ConfigError(
                f"CHAT_BACKEND=aws, but table '{settings.table}' does not exist in {settings.region}. "
                f"Create it with: python -m lib.admin create-table"
            )
    return _aws_database(settings, client)


def create_aws_database(settings: Settings) -> Database:
    """The AWS table as open_database opens it (the same client, deadlines, meter and errors), created first when
    it is missing: on-demand, TTL, point-in-time recovery, deletion protection, the vector index. `created` says
    whether it was. For `python -m lib.admin create-table`, with the operator's credentials (the app's task role
    cannot create tables)."""
    with _aws_errors(settings):
        client = _aws_client(settings)
        created = not table_exists(client, settings.table)
        if created:
            create_aws_table(client, settings.table, vector_dimensions=settings.embed_dimensions)
    return _aws_database(settings, client, created=created)


def _aws_client(settings: Settings) -> Any:
    return aws.client("dynamodb", region=settings.region, endpoint_url=settings.dynamodb_endpoint, config=RETRIES)


def _aws_database(settings: Settings, client: Any, *, created: bool = False) -> Database:
    meter = Meter(trust_reported=True)  # DynamoDB's own figures, where it reports them
    meter.install(client)
    return Database(
        client,
        settings.table,
        meter,
        f"DynamoDB table '{settings.table}' in {settings.region}",
        local=False,
        created=created,
        objects=aws_objects(settings, meter),
        max_question_bytes=settings.max_question_bytes,
    )


@contextlib.contextmanager
def _aws_errors(settings: Settings) -> Iterator[None]:
    """The first requests to AWS: missing credentials and refusals are ConfigErrors saying what to set, an
    unreachable endpoint is StoreUnavailable; never a silent switch to the local database."""
    try:
        yield
    except (NoCredentialsError, NoRegionError) as exc:
        raise ConfigError(
            "CHAT_BACKEND=aws, but no AWS credentials were found. Configure them (an instance role, "
            "AWS_PROFILE, or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY), or unset CHAT_BACKEND for the local demo."
        ) from exc
    except ClientError as exc:
        raise ConfigError(f"CHAT_BACKEND=aws, but DynamoDB refused us: {exc}") from exc
    except BotoCoreError as exc:
        raise StoreUnavailable(f"CHAT_BACKEND=aws, but DynamoDB in {settings.region} cannot be reached: {exc}") from exc
