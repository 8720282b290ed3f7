"""Structured logs: one JSON object per line on stderr, through the standard library's `logging`.

    from lib.logs import event
    event("turn.saved", session_id=..., message_id=..., outcome="done", latency_ms=812, output_tokens=480)

Rule: ids, counts, outcomes, error classes and codes only; never question, answer, title or memory text,
and never a secret. `event` refuses the field names that would carry them, so a slip fails in tests
rather than leaking into a log pipeline.
"""

from __future__ import annotations

import json
import logging
import sys
import time
import traceback
from typing import Any

LOGGER = "chat"
# Field names that would put chat text or secrets in a log line (or an audit record's detail: lib/storage/audit.py).
CHAT_TEXT_FIELDS = frozenset(
    {
        "text",
        "question",
        "answer",
        "input_body",
        "output_body",
        "title",
        "body",
        "content",
        "prompt",
        "memory",
        "summary",
        "query",
        "instructions",
        "secret",
        "api_key",
        "password",
        "token_value",
        "token",  # a share link's token (lib/storage/shares.py): whoever holds it reads the shared chat
    }
)


class JsonFormatter(logging.Formatter):
    """A record as one JSON line: time, level, event name, then the event's fields."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "event": record.getMessage(),
        }
        line.update(getattr(record, "fields", {}))
        if record.exc_info and record.exc_info[0] is not None:
            line["error_class"] = record.exc_info[0].__name__  # the class only: messages can quote chat text
            line["where"] = where(record.exc_info[2])
        return json.dumps(line, ensure_ascii=False, default=str)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time (test capture and Streamlit both swap it)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter())

    @property
    def stream(self) -> Any:  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, _: Any) -> None:
        pass


def logger() -> logging.Logger:
    """The app's logger, writing JSON lines to stderr (configured once, idempotent).

    It does not propagate: a root handler set up by someone else would print the
    exception's message and traceback, which can quote chat text.
    """
    log = logging.getLogger(LOGGER)
    if not any(isinstance(h, _StderrHandler) for h in log.handlers):
        log.addHandler(_StderrHandler())
        log.setLevel(logging.INFO)
        log.propagate = False
    return log


def event(name: str, *, level: int = logging.INFO, exc_info: bool = False, **fields: Any) -> None:
    """Log one event with its fields; ValueError if a field name would carry chat text or a secret."""
    leaked = CHAT_TEXT_FIELDS.intersection(fields)
    if leaked:
        raise ValueError(f"log fields {sorted(leaked)} would carry chat text or secrets")
    logger().log(level, name, extra={"fields": fields}, exc_info=exc_info)


def where(tb: Any, limit: int = 4) -> list[str]:
    """The innermost frames of a traceback as 'file:line function' (paths from the package root): enough to
    find a bug, and never the exception's message or a variable's value."""
    frames = traceback.extract_tb(tb)[-limit:] if tb is not None else []
    return [f"{_short(f.filename)}:{f.lineno} {f.name}" for f in frames]


def _short(path: str) -> str:
    marker = path.rfind("/lib/")
    if marker < 0:
        marker = path.rfind("/site-packages/")
    return path[marker + 1 :] if marker >= 0 else path.rsplit("/", 1)[-1]


def warning(name: str, **fields: Any) -> None:
    event(name, level=logging.WARNING, **fields)


def error(name: str, *, exc_info: bool = True, **fields: Any) -> None:
    """An error event; with exc_info the exception's class (never its message) is recorded."""
    event(name, level=logging.ERROR, exc_info=exc_info, **fields)
