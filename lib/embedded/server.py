"""The embedded DynamoDB for laptops and tests: moto's server, in-process on 127.0.0.1, SQLite as its disk.

Every request is serialized by one process-wide lock around the WSGI app (moto's
backend is process-wide; stock moto's TransactWriteItems checks and applies without
one: two tabs sending at once broke the invariants in 3-17 of 20 rounds across runs).
lib/embedded/moto_patches.py fixes the rest of what stock moto gets wrong for
long-lived use; both are applied by `LocalDynamo.start`.

With a data folder (lib/embedded/disk.py), acknowledged <=> durable: a write
request's final item images are committed in one SQLite transaction before its
response is sent. If that commit fails (disk full, read-only, I/O error, lock file
gone) the touched partitions are dropped from memory, so they reload exactly as
stored, and the client gets a retryable 500 InternalServerError: a failed write
changed nothing anywhere. A request that moto itself refused is undone the same
way (moto can leave half an update behind). Tables are made from their stored
requests at start; their items load lazily (lib/embedded/partitions.py).
"""

from __future__ import annotations

import io
import json
import os
import re
import threading
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Iterable

from werkzeug.serving import WSGIRequestHandler, make_server

from lib import logs
from lib.embedded import moto_patches, vectors
from lib.embedded.disk import Disk, DiskError, key_text
from lib.errors import StoreUnavailable

ACCOUNT_ID = "123456789012"  # moto's default account
_WRITE_OPERATIONS = {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"}
# Requests that make or change a table: kept on disk as sent, replayed at start.
_TABLE_CHANGES = {"CreateTable", "UpdateTable", "UpdateTimeToLive"}
_REGION_RE = re.compile(r"Credential=[^/]+/\d+/([^/]+)/")
_TARGET = "DynamoDB_20120810."
# moto's backend is one per process, so is the lock that serializes requests to it.
REQUEST_LOCK = threading.Lock()


def moto_backend(region: str) -> Any:
    """moto's in-process DynamoDB backend for a region (what the embedded server serves)."""
    from moto.dynamodb.models import dynamodb_backends

    return dynamodb_backends[ACCOUNT_ID][region]


def _touched_keys(operation: str, request: dict) -> list[tuple[str, dict | None, dict | None]]:
    """(table, key, item) named by a write request; `item` stands in for the key on a Put."""
    if operation in ("PutItem",):
        return [(request["TableName"], None, request["Item"])]
    if operation in ("UpdateItem", "DeleteItem"):
        return [(request["TableName"], request["Key"], None)]
    if operation == "TransactWriteItems":
        out = []
        for action in request["TransactItems"]:
            for kind, body in action.items():
                if kind != "ConditionCheck":
                    out.append((body["TableName"], body.get("Key"), body.get("Item")))
        return out
    out = []
    for table, requests in request["RequestItems"].items():  # BatchWriteItem
        for r in requests:
            if "PutRequest" in r:
                out.append((table, None, r["PutRequest"]["Item"]))
            else:
                out.append((table, r["DeleteRequest"]["Key"], None))
    return out


def _error(message: str) -> tuple[str, list, list[bytes]]:
    """A 500 InternalServerError as DynamoDB sends it: botocore retries it, then raises it with this message."""
    body = json.dumps({"__type": "com.amazonaws.dynamodb.v20120810#InternalServerError", "message": message}).encode()
    return (
        "500 Internal Server Error",
        [("Content-Type", "application/x-amz-json-1.0"), ("Content-Length", str(len(body)))],
        [body],
    )


def attach(table: Any, disk: Disk) -> None:
    """Make a moto table one on `disk`: lazy partitions where moto's table keeps SortedPartitions, else all items."""
    from lib.embedded.partitions import LazyPartitions, supports_lazy

    table.chat_disk = disk
    if supports_lazy(table):
        table.items = LazyPartitions(table, disk)
        return
    table.items = defaultdict(dict)
    after = None
    while rows := disk.rows_after(table.name, after, 5_000):
        for pk, sk, image in rows:
            _place(table, json.loads(image))
            after = (pk, sk)


def _place(table: Any, image: dict) -> None:
    from lib.embedded.partitions import item_from_wire

    item = item_from_wire(table, image)
    if table.range_key_attr:
        table.items[item.hash_key][item.range_key] = item
    else:
        table.items[item.hash_key] = item


def reload_partition(table: Any, hash_key: Any) -> None:
    """Make memory match the disk for one partition (after a write that failed or was refused)."""
    forget = getattr(table.items, "forget", None)
    if forget is not None:
        forget(hash_key)
        return
    dict.pop(table.items, hash_key, None)
    for image in table.chat_disk.partition(table.name, key_text(hash_key.type, hash_key.value)):
        _place(table, json.loads(image))


class _SerializedApp:
    """WSGI middleware: one request at a time; each write committed to disk (or undone) before answering."""

    def __init__(self, app: Callable, disk: Disk | None, default_region: str):
        self._app = app
        self._disk = disk
        self._region = default_region

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        operation = environ.get("HTTP_X_AMZ_TARGET", "").rpartition(".")[2]
        match = _REGION_RE.search(environ.get("HTTP_AUTHORIZATION", ""))
        region = match.group(1) if match else self._region
        from lib.embedded.partitions import Loads

        with REQUEST_LOCK:
            loaded_before = Loads.since_freeze
            status, headers, chunks = self._serve(environ, operation, body, region)
            if Loads.since_freeze != loaded_before:
                self._trim(region)
            Loads.settle()
        start_response(status, headers)
        return chunks

    def _serve(self, environ: dict, operation: str, body: bytes, region: str) -> tuple[str, list, list[bytes]]:
        captured: list[Any] = []

        def capture(status: str, headers: list, exc_info: Any = None) -> Callable:
            captured[:] = [status, headers]
            return lambda data: None

        try:
            request = (
                json.loads(body)
                if body
                and (
                    operation in _WRITE_OPERATIONS
                    or operation in _TABLE_CHANGES
                    or operation in vectors.READS
                    or operation == "DeleteTable"
                )
                else {}
            )
        except ValueError:
            request = {}  # moto refuses the same body
        vectors.STATE.write_bytes.clear()
        try:  # vector indexes (lib/embedded/vectors.py): moto knows none of them
            if operation == "SearchVectors":
                return vectors.ok_body(vectors.STATE.search(request, moto_backend(region)))
            if operation in _WRITE_OPERATIONS:
                vectors.STATE.check_items(operation, request)
            elif operation in ("CreateTable", "UpdateTable"):
                stripped = vectors.STATE.for_moto(operation, request, moto_backend(region))
                if stripped is not None:
                    environ["wsgi.input"], environ["CONTENT_LENGTH"] = io.BytesIO(stripped), str(len(stripped))
        except vectors.VectorError as exc:
            return vectors.error_body(exc)
        except DiskError as exc:
            return _error(str(exc))
        owned_before = self._owned(region, request.get("TableName")) if operation == "DeleteTable" else False
        failure: DiskError | None = None
        if self._disk is not None:
            self._disk.failed = None
        try:
            chunks = list(self._app(environ, capture))
            status, headers = captured
        except DiskError as exc:  # a partition could not be read from disk
            failure, status = exc, "500"
        except Exception as exc:
            if not isinstance(exc.__cause__ or exc.__context__, DiskError):
                raise
            failure, status = exc.__cause__ or exc.__context__, "500"  # type: ignore[assignment]
        if failure is None and self._disk is not None and self._disk.failed is not None:
            failure = self._disk.failed  # swallowed by moto (a transaction turns errors into cancellation reasons)
        ok = status.startswith("200") and failure is None
        try:
            if operation in _WRITE_OPERATIONS:
                self._settle_write(operation, request, region, ok)
            elif ok and self._disk is not None and operation in _TABLE_CHANGES | {"DeleteTable"}:
                self._settle_table_change(operation, request, region, owned_before)
            if ok and operation in _TABLE_CHANGES | {"DeleteTable"}:
                vectors.STATE.table_changed(operation, request, moto_backend(region))
        except DiskError as exc:
            failure = exc
        if failure is not None:
            logs.error("embedded.request_refused", exc_info=False, operation=operation, reason=str(failure))
            return _error(str(failure))
        headers, chunks = vectors.decorate(operation, request, status, headers, chunks, region, vectors.STATE)
        return status, headers, chunks

    def _owned(self, region: str, table_name: str | None) -> bool:
        table = moto_backend(region).tables.get(table_name) if table_name else None
        return table is not None and self._disk is not None and getattr(table, "chat_disk", None) is self._disk

    def _settle_write(self, operation: str, request: dict, region: str, ok: bool) -> None:
        """Commit the final images of what a successful write touched; undo in memory what a failed one touched."""
        if not ok and operation == "TransactWriteItems" and self._disk is not None and self._disk.failed is None:
            return  # a cancelled transaction put back its own before-images (moto_patches fix 1)
        backend = moto_backend(region)
        touched: dict[Disk, list[tuple[Any, Any, Any]]] = {}
        try:
            named = _touched_keys(operation, request)
        except (KeyError, TypeError, AttributeError):
            named = []  # a malformed request: moto refused it
        for table_name, key, item in named:
            table = backend.tables.get(table_name)
            disk = getattr(table, "chat_disk", None)
            if disk is None:
                if ok and table is not None:  # an in-memory table: its vector entries follow it here
                    vectors.settle_in_memory(backend, table, key or item or {})
                continue  # an in-memory table
            try:
                hash_key, range_key = backend.get_keys_value(table, key or item or {})
            except Exception:
                continue  # moto refused the malformed key itself
            touched.setdefault(disk, []).append((table, hash_key, range_key))
        for disk, keys in touched.items():
            try:
                if not ok:
                    raise _Undo
                writes = []
                for table, hash_key, range_key in keys:
                    current = table.get_item(hash_key, range_key)
                    writes.append(
                        (
                            table.name,
                            key_text(hash_key.type, hash_key.value),
                            key_text(range_key.type, range_key.value) if range_key is not None else "",
                            json.dumps(current.to_json()["Attributes"], ensure_ascii=False)
                            if current is not None
                            else None,
                        )
                    )
                disk.commit(writes, vectors.STATE.statements(writes))  # vectors in the same transaction
                vectors.STATE.after_commit(writes)
            except (_Undo, DiskError):
                for table, hash_key, _ in keys:
                    reload_partition(table, hash_key)
                if ok:
                    raise

    def _settle_table_change(self, operation: str, request: dict, region: str, owned_before: bool) -> None:
        backend = moto_backend(region)
        name = request["TableName"]
        if operation == "DeleteTable":
            if owned_before:
                try:
                    self._disk.drop_table(name)
                except DiskError:
                    restore_table(self._app, self._disk, region, name)  # still on disk: serve it again
                    raise
            return
        if operation == "CreateTable":
            try:
                self._disk.record_table_request(name, operation, request)
            except DiskError:
                backend.delete_table(name)
                raise
            attach(backend.get_table(name), self._disk)
        elif self._owned(region, name):
            self._disk.record_table_request(name, operation, request)

    def _trim(self, region: str) -> None:
        for table in list(moto_backend(region).tables.values()):
            trim = getattr(table.items, "trim", None)
            if trim is not None:
                trim()


class _Undo(Exception):
    """A write moto refused: reload what it touched."""


def _call_moto(app: Callable, region: str, operation: str, request: dict) -> tuple[int, dict]:
    """One request straight into moto's WSGI app (no HTTP, no middleware): how stored table requests replay."""
    from werkzeug.test import Client

    response = Client(app).post(
        "/",
        data=json.dumps(request),
        headers={
            "X-Amz-Target": _TARGET + operation,
            "Content-Type": "application/x-amz-json-1.0",
            "Authorization": f"AWS4-HMAC-SHA256 Credential=local/20260101/{region}/dynamodb/aws4_request, "
            "SignedHeaders=host, Signature=0",
        },
    )
    return response.status_code, json.loads(response.get_data() or b"{}")


def restore_table(app: Callable, disk: Disk, region: str, name: str) -> None:
    """Make one stored table in moto again from its requests, and put it on disk (its items stay unloaded)."""
    for table, operation, request in disk.table_requests():
        if table != name:
            continue
        replayed = vectors.replayable(operation, request, moto_backend(region))  # vector parts left out for moto
        status, answer = _call_moto(app, region, operation, replayed)
        if status == 200:
            vectors.STATE.table_changed(operation, request, moto_backend(region), replay=True)
        if status != 200:
            raise StoreUnavailable(
                f"The local database in {disk.folder}/ holds a table '{name}' that the embedded "
                f"server refused to make ({answer.get('__type', status)}): move the folder away, "
                "or restore a backup with `python -m lib.admin restore FILE --force`."
            )
    attach(moto_backend(region).get_table(name), disk)


class _QuietHandler(WSGIRequestHandler):
    """No access log: the app's own output stays readable. No Nagle: werkzeug writes a response's headers and its
    body in two sends, and Nagle holds a body's last segment back until the client acknowledges the headers."""

    disable_nagle_algorithm = True

    def log_request(self, *args: Any, **kwargs: Any) -> None:
        pass


EXPIRE_EVERY_S = 60.0  # how often the embedded database deletes items past their TTL attribute
_EXPIRE_BATCH = 500  # items deleted per table per round: one round never holds the lock for long


def _expired_images(table: Any, attribute: str, now: float, limit: int) -> list[dict]:
    """Up to `limit` items of `table` (wire format) whose number `attribute` is at or before `now`."""
    disk = getattr(table, "chat_disk", None)
    if disk is not None:
        return disk.expired(table.name, attribute, now, limit)
    found = []
    for partition in list(table.items.values()):
        for item in list(partition.values()) if isinstance(partition, dict) else [partition]:
            image = item.to_json()["Attributes"]
            value = image.get(attribute, {}).get("N")
            if value is not None and float(value) <= now:
                found.append(image)
                if len(found) >= limit:
                    return found
    return found


class LocalDynamo:
    """moto's DynamoDB on 127.0.0.1:<free port>, serialized, optionally stored in `data_dir` (SQLite).

    It keeps DynamoDB's TTL rule too: every EXPIRE_EVERY_S, items whose TTL attribute (a number of epoch seconds)
    has passed are deleted, each by a conditional DeleteItem through the same door as every request (so it is
    committed to disk like any write, and an item whose time was moved forward meanwhile stays). Like DynamoDB,
    the deletion comes some time after the moment: readers that must not show an expired item check it."""

    def __init__(
        self,
        data_dir: str | os.PathLike | None = None,
        region: str = "us-east-1",
        *,
        expire_every_s: float | None = EXPIRE_EVERY_S,
    ):
        self.data_dir = Path(data_dir) if data_dir else None
        self.region = region
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.disk: Disk | None = None
        self.tables: list[str] = []  # the tables this server put into moto from its disk
        self.migrated: str | None = None  # what start imported from an old journal, if anything
        self._stopping = threading.Event()
        self._app: Callable | None = None
        self._expire_every_s = expire_every_s

    @property
    def endpoint_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "LocalDynamo":
        """Open and check the disk, make its tables, then serve; all or nothing (StoreUnavailable/ConfigError)."""
        from moto.moto_server.werkzeug_app import create_backend_app

        moto_patches.apply()
        moto_app = create_backend_app("dynamodb")
        try:
            if self.data_dir is not None:
                from lib.embedded import migrate

                self.disk = Disk.open(self.data_dir)
                self.migrated = migrate.import_journal(self.disk)
                self._restore_tables(moto_app)
            app = self._app = _SerializedApp(moto_app, self.disk, self.region)
            self._server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=_QuietHandler)
        except BaseException:
            self.stop()
            raise
        # A short poll interval: `stop` (tests, admin restore) waits for the loop to notice.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="local-dynamodb", daemon=True
        )
        self._thread.start()
        if self.disk is not None:
            threading.Thread(target=self._sync, args=(self.disk,), name="local-dynamodb-sync", daemon=True).start()
        if self._expire_every_s is not None:
            threading.Thread(target=self._expire_loop, name="local-dynamodb-ttl", daemon=True).start()
        from lib.embedded.partitions import Loads

        Loads.settle(force=True)  # the process's start-up objects: modules, moto's own structures
        return self

    def _restore_tables(self, moto_app: Callable) -> None:
        backend = moto_backend(self.region)
        names = list(dict.fromkeys(table for table, _, _ in self.disk.table_requests()))
        with REQUEST_LOCK:
            for name in names:
                if name in backend.tables:
                    raise StoreUnavailable(
                        f"Table '{name}' of {self.disk.folder}/ is already served by another "
                        "local database in this process: use one CHAT_DATA_DIR per process."
                    )
                restore_table(moto_app, self.disk, self.region, name)
                self.tables.append(name)

    def _sync(self, disk: Disk) -> None:
        """Checkpoint (fsync) what was committed, within SYNC_INTERVAL_S: the bound on what an OS crash can lose."""
        from lib.embedded.disk import SYNC_INTERVAL_S

        while not self._stopping.wait(SYNC_INTERVAL_S):
            if not disk.unsynced:
                continue
            with REQUEST_LOCK:
                if self.disk is not disk:
                    return
                try:
                    disk.checkpoint()
                except DiskError as exc:  # the next commit will fail with the same sentence; retried next round
                    logs.error("embedded.checkpoint_failed", exc_info=False, reason=str(exc))

    def _expire_loop(self) -> None:
        while not self._stopping.wait(self._expire_every_s):
            try:
                self.expire_now()
            except Exception as exc:  # logged and tried again next round: TTL is a sweep, not a promise of the moment
                logs.error("embedded.expire_failed", exc_info=False, error_class=type(exc).__name__)

    def expire_now(self, now: float | None = None) -> int:
        """One TTL round: delete the items past their table's TTL attribute (at most _EXPIRE_BATCH a table);
        returns how many were deleted. Also what tests call instead of waiting for the loop."""
        import time

        now = time.time() if now is None else now
        with REQUEST_LOCK:
            backend = moto_backend(self.region)
            work = []
            for table in list(backend.tables.values()):
                ttl = getattr(table, "ttl", None) or {}
                if ttl.get("TimeToLiveStatus") == "ENABLED" and ttl.get("AttributeName"):
                    attribute = ttl["AttributeName"]
                    key_names = [table.hash_key_attr] + ([table.range_key_attr] if table.range_key_attr else [])
                    for image in _expired_images(table, attribute, now, _EXPIRE_BATCH):
                        work.append((table.name, attribute, {k: image[k] for k in key_names}))
        deleted = 0
        for table_name, attribute, key in work:  # outside the lock: each delete takes it like any request
            status, _ = _call_moto(
                self._app,
                self.region,
                "DeleteItem",
                {
                    "TableName": table_name,
                    "Key": key,
                    # only if still expired: a write that moved the time forward since the read keeps the item
                    "ConditionExpression": "#ttl <= :now",
                    "ExpressionAttributeNames": {"#ttl": attribute},
                    "ExpressionAttributeValues": {":now": {"N": str(int(now))}},
                },
            )
            deleted += status == 200
        if deleted:
            logs.event("embedded.expired", items=deleted)
        return deleted

    def stop(self) -> None:
        """Stop serving, take this disk's tables out of moto, release the folder."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self.disk is not None:
            with REQUEST_LOCK:
                backend = moto_backend(self.region)
                for name, table in list(backend.tables.items()):
                    if getattr(table, "chat_disk", None) is self.disk:
                        del backend.tables[name]
            self.disk.close()
            self.disk = None
