"""The embedded DynamoDB for laptops and tests: moto's server, in-process on 127.0.0.1.

Every request is serialized by one lock around the WSGI app (stock moto's
TransactWriteItems checks and applies without one: two tabs sending at once broke
the invariants in 12-17 of 20 rounds). lib/embedded/moto_patches.py fixes the rest of what
stock moto gets wrong for long-lived use; both are applied by `LocalDynamo.start`.

Persistence: after each successful write the final images of the items it touched
are appended, as one JSON line per request, to `journal.jsonl` before the response
is sent; on start the snapshot and journal are replayed and compacted into a new
snapshot. A request that got its response is on disk (in the OS's page cache; an
OS crash can lose the last moments, a killed process loses nothing).
"""
from __future__ import annotations

import fcntl
import io
import json
import os
import re
import threading
from pathlib import Path
from typing import Any, Callable, Iterable

from werkzeug.serving import WSGIRequestHandler, make_server

from lib.embedded import moto_patches
from lib.errors import StoreUnavailable

ACCOUNT_ID = "123456789012"  # moto's default account
_WRITE_OPERATIONS = {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"}
_REGION_RE = re.compile(r"Credential=[^/]+/\d+/([^/]+)/")


def moto_backend(region: str) -> Any:
    """moto's in-process DynamoDB backend for a region (what the embedded server serves)."""
    from moto.dynamodb.models import dynamodb_backends

    return dynamodb_backends[ACCOUNT_ID][region]


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
        backend = moto_backend(region)
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

    @property
    def endpoint_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "LocalDynamo":
        from moto.moto_server.werkzeug_app import create_backend_app

        moto_patches.apply()
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
        backend = moto_backend(self.region)
        for table_name in sorted({table for table, _ in state}):
            if table_name not in backend.tables:
                create(table_name)
        for (table_name, _), item in state.items():
            backend.put_item(table_name, item)
        self._journal.compact(state)
        return len(state)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._journal is not None:
            self._journal.close()
