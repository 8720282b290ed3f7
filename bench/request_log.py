"""Runs streamlit with every DynamoDB request of its process written to a file, for bench/turn_cost.py.

    python -m bench.request_log REQUESTS.jsonl run app.py [streamlit options]

Before streamlit's main, a botocore handler is added to the handlers every new botocore session registers, so
every DynamoDB client the app makes (each has its own session, lib/aws.py) logs each call once (after its
retries) as a JSON line: wall time, duration, operation, the app's action label, kind and units by the app's
own capacity model (lib.storage.capacity.modeled_units, with the before-image sizes the app's meter put in the
request's context: the embedded server reports wrong figures, so the app bills by the model too), the units the
server reported, the DynamoDB size of the items read, and the response's size. Nothing of the app is patched.
`RequestLog` and `tally` read the file back in the bench's process.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def install(path: str) -> None:
    """Log every DynamoDB call of every botocore session made from now on to `path` (JSON lines, appended)."""
    import botocore.handlers

    out = open(path, "a", buffering=1, encoding="utf-8")  # open for the process's life
    lock = threading.Lock()

    def sent(params: dict, context: dict, **_: Any) -> None:
        context["request_log_sent"] = time.perf_counter()
        with contextlib.suppress(ValueError):  # the request as sent, in wire format (DynamoDB speaks JSON)
            context["request_log_params"] = json.loads(params.get("body") or b"{}")

    def answered(http_response: Any, parsed: dict, model: Any, context: dict, **_: Any) -> None:
        try:
            record = _record(http_response, parsed, model.name, context)
        except Exception as exc:  # a bug here must not fail the app's request: it shows in the log instead
            record = {"t": time.time(), "operation": model.name, "log_error": repr(exc)}
        with lock:
            out.write(json.dumps(record) + "\n")

    botocore.handlers.BUILTIN_HANDLERS.append(("before-call.dynamodb", sent))
    botocore.handlers.BUILTIN_HANDLERS.append(("after-call.dynamodb", answered))


def _record(http_response: Any, parsed: dict, operation: str, context: dict) -> dict:
    from lib.storage.capacity import CHARGED_FAILURES, modeled_units, reported_units, vector_bytes
    from lib.storage.itemsize import item_size

    ok = http_response.status_code < 300
    params = context.get("request_log_params", {})
    error = None if ok else (parsed.get("Error") or {}).get("Code")
    kind, units = modeled_units(operation, params, parsed if ok else {}, context.get("meter_prior"))
    items = _items_read(operation, parsed)
    return {
        "t": time.time(),
        "ms": (time.perf_counter() - context.get("request_log_sent", time.perf_counter())) * 1000,  # retries included
        "operation": operation,
        "action": context.get("meter_action", ""),
        "kind": kind,
        "units": units if ok or error in CHARGED_FAILURES else 0.0,  # as the app's meter counts a refused write
        "reported": reported_units(parsed) if ok else None,
        "vector_bytes": vector_bytes(operation, params, parsed)[0] if ok and kind != "other" else 0.0,
        "items": len(items),
        "item_bytes": sum(item_size(i) for i in items),
        "response_bytes": len(http_response.content or b""),
        "ok": ok,
        "error": error,
        "thread": threading.current_thread().name,
    }


def _items_read(operation: str, parsed: dict) -> list[dict]:
    """The items a read returned, in wire format (what DynamoDB bills a read by)."""
    if operation == "BatchGetItem":
        return [i for items in (parsed.get("Responses") or {}).values() for i in items]
    if operation == "TransactGetItems":
        return [r["Item"] for r in parsed.get("Responses") or [] if r.get("Item")]
    return parsed.get("Items") or ([parsed["Item"]] if parsed.get("Item") else [])


class RequestLog:
    """The JSON lines `install` writes in the app's process, read by the bench as they come."""

    def __init__(self, path: Path):
        self.path, self.records, self._offset, self._changed = path, [], 0, time.monotonic()

    def read(self) -> list[dict]:
        with contextlib.suppress(FileNotFoundError), self.path.open("rb") as log:
            log.seek(self._offset)
            data = log.read()
            data = data[: data.rfind(b"\n") + 1]  # whole lines only
            self._offset += len(data)
            self.records += [json.loads(line) for line in data.splitlines()]
            if data:
                self._changed = time.monotonic()
        return self.records

    def idle_s(self) -> float:
        """Seconds since the last request logged (as far as read now)."""
        self.read()
        return time.monotonic() - self._changed

    def between(self, start: float, end: float) -> list[dict]:
        return [r for r in self.read() if start <= r["t"] < end]


def tally(records: list[dict]) -> dict:
    """Requests, units and bytes of some logged requests, and which operations for which action labels."""
    broken = [r for r in records if "log_error" in r]
    if broken:
        raise SystemExit(f"bench/request_log.py could not log a request: {broken[0]['log_error']}")
    ops = Counter(f"{r['operation']}({r['action']})" for r in records)
    return {
        "requests": len(records),
        "rru": sum(r["units"] for r in records if r["kind"] == "read"),
        "wru": sum(r["units"] for r in records if r["kind"] == "write"),
        "items": sum(r["items"] for r in records),
        "item_kb": sum(r["item_bytes"] for r in records) / 1024,
        "response_kb": sum(r["response_bytes"] for r in records) / 1024,
        "by_action": {a: sum(r["units"] for r in records if r["action"] == a) for a in {r["action"] for r in records}},
        "ops": " ".join(f"{n}x{op}" if n > 1 else op for op, n in ops.items()) or "none",
    }


def main() -> None:
    if len(sys.argv) < 3:
        raise SystemExit(__doc__.split("\n\n")[1])
    sys.path.insert(0, str(ROOT))
    install(sys.argv[1])
    from streamlit.web.cli import main as streamlit_main

    sys.argv = ["streamlit", *sys.argv[2:]]
    streamlit_main(prog_name="streamlit")


if __name__ == "__main__":
    main()
