"""The embedded DynamoDB for laptops and tests: moto's server, in-process on 127.0.0.1, made safe to use for weeks.

Three measured defects of moto 5.2.x are fixed here, for this server only:
1. TransactWriteItems is not atomic under concurrency (it checks and applies
   without a lock): every request is serialized by one lock around the WSGI app.
2. Every transaction deep-copies each table it names (266 ms at 4,000 items) to
   roll back: with requests serialized, we snapshot only the items a transaction
   touches and restore just those.
3. BaseModel keeps every instance ever made (356 MB after 200 transactions on
   2,000 items): DynamoDB's model classes stop tracking instances.
4. The item size limit is 405,000 bytes and counts an attribute being replaced
   twice (old and new value), so an answer written into a large item fails at
   about half the real limit: the check uses DynamoDB's 400 KB (409,600 bytes),
   counting the replaced attribute once.
5. Every Query sorts the whole table and scans it for the partition, so a sidebar
   or a session gets slower as anyone's history grows: each partition keeps its
   sort keys in order, and a Query bisects to its start and reads one page.

Persistence: after each successful write the final images of the items it touched
are appended, as one JSON line per request, to `journal.jsonl` before the response
is sent; on start the snapshot and journal are replayed and compacted into a new
snapshot. A request that got its response is on disk (in the OS's page cache; an
OS crash can lose the last moments, a killed process loses nothing).
"""
from __future__ import annotations

import bisect
import copy
import fcntl
import io
import json
import os
import re
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable, Iterable

from lib.errors import StoreUnavailable
from lib.itemsize import ITEM_LIMIT_BYTES
from werkzeug.serving import WSGIRequestHandler, make_server

ACCOUNT_ID = "123456789012"  # moto's default account
RESULT_SIZE_LIMIT = 1_000_000  # a Query page stops at 1 MB, as moto's own does
_WRITE_OPERATIONS = {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"}
_REGION_RE = re.compile(r"Credential=[^/]+/\d+/([^/]+)/")

_patch_lock = threading.Lock()
_patched = False


def _backend(region: str) -> Any:
    from moto.dynamodb.models import dynamodb_backends

    return dynamodb_backends[ACCOUNT_ID][region]


class _NoTracking(list):
    """A list that keeps nothing: moto only reads it to reset its state."""

    def append(self, _: Any) -> None:
        pass


def _patch_moto() -> None:
    """Fix defects 2 and 3 (see the module docstring). Safe only with requests serialized."""
    global _patched
    with _patch_lock:
        if _patched:
            return
        import moto.dynamodb.models as models
        from moto.core.model_instances import model_data
        from moto.dynamodb.models.table import Table

        for model in model_data.get("dynamodb", {}).values():
            model.instances_tracked = _NoTracking()

        class _CopyWithoutTables:
            """moto's module sees this as `copy`: a whole-table deepcopy becomes the table itself."""

            @staticmethod
            def deepcopy(value: Any, memo: Any = None) -> Any:
                return value if isinstance(value, Table) else copy.deepcopy(value, memo)

        original = models.DynamoDBBackend.transact_write_items

        def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
            touched = []  # (table, hash, range, deep copy of the item before) in request order
            for action in transact_items:
                for kind, body in action.items():
                    table = self.tables.get(body.get("TableName"))
                    if table is None:
                        continue
                    key_source = body.get("Item") if kind == "Put" else body.get("Key")
                    try:
                        hash_key, range_key = self.get_keys_value(table, key_source or {})
                    except Exception:
                        continue  # moto rejects the malformed action itself
                    touched.append((table, hash_key, range_key, copy.deepcopy(table.get_item(hash_key, range_key))))
            try:
                original(self, transact_items)
            except Exception:
                for table, hash_key, range_key, before in reversed(touched):
                    table.delete_item(hash_key, range_key)
                    if before is not None:
                        if range_key is None:
                            table.items[hash_key] = before
                        else:
                            table.items[hash_key][range_key] = before
                raise

        from moto.dynamodb.exceptions import ItemSizeTooLarge
        from moto.dynamodb.models import dynamo_type
        from moto.dynamodb.models.utilities import bytesize

        def _size(name: str, value: Any) -> int:
            return bytesize(name) + (value.size() if isinstance(value, dynamo_type.DynamoType) else bytesize(str(value)))

        def __setitem__(self: dict, name: str, value: Any) -> None:
            others = sum(_size(k, v) for k, v in self.items() if k != name)
            if others + _size(name, value) > ITEM_LIMIT_BYTES:
                raise ItemSizeTooLarge
            dict.__setitem__(self, name, value)

        dynamo_type.LimitedSizeDict.__setitem__ = __setitem__
        models.copy = _CopyWithoutTables
        _index_partitions(Table)
        models.DynamoDBBackend.transact_write_items = transact_write_items
        _patched = True


def _sort_value(key: Any) -> Any:
    """A sort key's native value, ordered as DynamoDB orders it (strings by code point, numbers by value)."""
    return Decimal(key.value) if key.type == "N" else key.value


class SortedPartition(dict):
    """One partition's items by sort key, with the keys also kept in order for bisecting (defect 5)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.key_of = {_sort_value(k): k for k in self}  # native value -> moto's key object
        self.order = sorted(self.key_of)

    def __setitem__(self, key: Any, value: Any) -> None:
        if key not in self:
            native = _sort_value(key)
            bisect.insort(self.order, native)
            self.key_of[native] = key
        super().__setitem__(key, value)

    def pop(self, key: Any, *default: Any) -> Any:
        if key in self:
            native = _sort_value(key)
            del self.order[bisect.bisect_left(self.order, native)]
            del self.key_of[native]
        return super().pop(key, *default)

    def __delitem__(self, key: Any) -> None:
        self.pop(key)

    def __reduce__(self) -> Any:
        return (SortedPartition, (dict(self),))


def _index_partitions(table_class: Any) -> None:
    """New tables keep SortedPartitions; their plain-table Queries read one page instead of the whole table."""
    from collections import defaultdict

    from moto.dynamodb.models.dynamo_type import DynamoType

    original_init, original_query = table_class.__init__, table_class.query

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        if self.range_key_attr and self.range_key_type in ("S", "N"):
            self.items = defaultdict(SortedPartition)

    def query(self: Any, hash_key: Any, range_comparison: Any, range_objs: list, limit: int,
              exclusive_start_key: dict | None, scan_index_forward: bool, projection_expressions: Any,
              index_name: str | None = None, consistent_read: bool = False, filter_expression: Any = None,
              hash_key_conditions: Any = None, range_key_conditions: Any = None, **filter_kwargs: Any) -> Any:
        partition = self.items.get(hash_key) if hash_key is not None else None
        if index_name or filter_kwargs or (range_key_conditions and len(range_key_conditions) > 1) \
                or not isinstance(partition, SortedPartition):
            return original_query(self, hash_key, range_comparison, range_objs, limit, exclusive_start_key,
                                  scan_index_forward, projection_expressions, index_name, consistent_read,
                                  filter_expression, hash_key_conditions, range_key_conditions, **filter_kwargs)
        order = partition.order
        if exclusive_start_key is not None:
            start = _sort_value(DynamoType(exclusive_start_key[self.range_key_attr]))
            position = bisect.bisect_right(order, start) if scan_index_forward else bisect.bisect_left(order, start) - 1
        else:
            position = 0 if scan_index_forward else len(order) - 1
        step = 1 if scan_index_forward else -1
        results, size, scanned, last_key = [], 0, 0, None
        while 0 <= position < len(order):
            item = partition[partition.key_of[order[position]]]
            if len(results) == limit or size + item.size() > RESULT_SIZE_LIMIT:
                last_key = self._get_last_evaluated_key(results[-1], None)
                break
            position += step
            if range_comparison and not item.range_key.compare(range_comparison, range_objs):
                continue
            results.append(item)
            size += item.size()
            scanned += 1
        results = copy.deepcopy(results)
        if filter_expression is not None:
            results = [item for item in results if filter_expression.expr(item)]
        if projection_expressions:
            results = [r.project(projection_expressions) for r in results]
        return results, scanned, last_key

    table_class.__init__ = __init__
    table_class.query = query


class Journal:
    """Snapshot + append-only journal of final item images, one line per write request.

    One process owns a folder at a time (an exclusive lock on `lock`): a second one
    appending or compacting would lose the first one's writes.
    """

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.snapshot_path = self.folder / "snapshot.jsonl"
        self.journal_path = self.folder / "journal.jsonl"
        self._file: io.TextIOBase | None = None
        self._lock_file = (self.folder / "lock").open("a+")
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.close()
            raise StoreUnavailable(
                f"The local database in {self.folder}/ is in use by another process (another `streamlit run` or "
                "admin command). Stop it first, or set CHAT_DATA_DIR to another folder.") from None

    def load(self) -> dict[tuple[str, str], dict]:
        """{(table, key json): item} from the snapshot, then the journal; a torn last line is skipped."""
        state: dict[tuple[str, str], dict] = {}
        for path in (self.snapshot_path, self.journal_path):
            if not path.exists():
                continue
            with path.open(encoding="utf-8") as lines:
                for line in lines:
                    try:
                        entry = json.loads(line)
                    except json.JSONDecodeError:
                        continue  # a line cut by a crash: that request never got its response
                    for table, key, item in entry["w"]:
                        marker = (table, json.dumps(key, sort_keys=True))
                        if item is None:
                            state.pop(marker, None)
                        else:
                            state[marker] = item
        return state

    def compact(self, state: dict[tuple[str, str], dict]) -> None:
        """Write the state as the new snapshot (atomically), then empty the journal."""
        tmp = self.snapshot_path.with_suffix(".tmp")
        with tmp.open("w", encoding="utf-8") as out:
            for (table, key), item in state.items():
                out.write(json.dumps({"w": [[table, json.loads(key), item]]}, ensure_ascii=False) + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.snapshot_path)
        self.journal_path.write_text("", encoding="utf-8")

    def append(self, writes: list[list[Any]]) -> None:
        if self._file is None:
            self._file = self.journal_path.open("a", encoding="utf-8")
        self._file.write(json.dumps({"w": writes}, ensure_ascii=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._lock_file.close()  # releases the lock


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


class _SerializedApp:
    """WSGI middleware: one request at a time, and journal each successful write before answering."""

    def __init__(self, app: Callable, journal: Journal | None, default_region: str):
        self._app = app
        self._journal = journal
        self._region = default_region
        self.lock = threading.Lock()

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        operation = environ.get("HTTP_X_AMZ_TARGET", "").rpartition(".")[2]
        status_holder: list[str] = []

        def capture(status: str, headers: list, exc_info: Any = None) -> Any:
            status_holder.append(status)
            return start_response(status, headers, exc_info)

        with self.lock:
            chunks = list(self._app(environ, capture))  # run to completion inside the lock
            if self._journal is not None and operation in _WRITE_OPERATIONS and status_holder[0].startswith("200"):
                match = _REGION_RE.search(environ.get("HTTP_AUTHORIZATION", ""))
                self._journal.append(self._images(operation, json.loads(body), match.group(1) if match else self._region))
        return chunks

    @staticmethod
    def _images(operation: str, request: dict, region: str) -> list[list[Any]]:
        backend = _backend(region)
        writes = []
        for table_name, key, item in _touched_keys(operation, request):
            table = backend.get_table(table_name)
            key = key or {a: item[a] for a in (table.hash_key_attr, table.range_key_attr) if a}
            current = backend.get_item(table_name, key)
            writes.append([table_name, key, current.to_json()["Attributes"] if current else None])
        return writes


class _QuietHandler(WSGIRequestHandler):
    """No access log: the app's own output stays readable."""

    def log_request(self, *args: Any, **kwargs: Any) -> None:
        pass


class LocalDynamo:
    """moto's DynamoDB on 127.0.0.1:<free port>, serialized, optionally persisted to `data_dir`."""

    def __init__(self, data_dir: str | os.PathLike | None = None, region: str = "us-east-1"):
        self.data_dir = Path(data_dir) if data_dir else None
        self.region = region
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._journal: Journal | None = None
        self.restored_items = 0

    @property
    def endpoint_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "LocalDynamo":
        from moto.moto_server.werkzeug_app import create_backend_app

        _patch_moto()
        if self.data_dir is not None:
            self._journal = Journal(self.data_dir)
        app = _SerializedApp(create_backend_app("dynamodb"), self._journal, self.region)
        self._server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=_QuietHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="local-dynamodb", daemon=True)
        self._thread.start()
        return self

    def restore(self, create: Callable[[str], None]) -> int:
        """Replay snapshot + journal into the backend (tables made by `create`), then compact. Returns items restored."""
        if self._journal is None:
            return 0
        state = self._journal.load()
        backend = _backend(self.region)
        for table_name in sorted({table for table, _ in state}):
            if table_name not in backend.tables:
                create(table_name)
        for (table_name, _), item in state.items():
            backend.put_item(table_name, item)
        self._journal.compact(state)
        self.restored_items = len(state)
        return len(state)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._journal is not None:
            self._journal.close()
