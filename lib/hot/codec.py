"""The hot tier's values as JSON: a saved turn, and a chat's first page (meta, summary, newest turns, cursor).

Replicas of two releases share one Redis during a rolling deploy, so decoding is tolerant in one direction: a
field this release does not know (a newer release added it) is left out. A value this release cannot rebuild
(a field it needs is missing, a wrong type, junk) raises BadValue, and the hot tier treats it as a miss: the
page reads DynamoDB, as it would without Redis. SCHEMA goes into every key (lib.hot.tier.key_prefix) and
changes only when an encoding changes incompatibly, so two such releases never read each other's values.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, TypeVar

from lib.storage.attachments import from_fields as attachment_fields
from lib.storage.objects import BodyRef
from lib.storage.records import Message, Session, SessionView, Summary

SCHEMA = 1
T = TypeVar("T")


class BadValue(ValueError):
    """A value in Redis that this release cannot decode."""


def message_json(message: Message) -> str:
    return json.dumps(dataclasses.asdict(message), default=_sets)


def _sets(value: Any) -> Any:
    """JSON for the one non-JSON value a record holds: a set of numbers (a turn's kept versions)."""
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


def message_of(text: str) -> Message:
    return _message(_loads(text))


def view_json(view: SessionView) -> str:
    return json.dumps(
        {
            "session": dataclasses.asdict(view.session) if view.session else None,
            "messages": [dataclasses.asdict(m) for m in view.messages],
            "cursor": view.cursor,
            "summary": dataclasses.asdict(view.summary) if view.summary else None,
        },
        default=_sets,
    )


def view_of(text: str) -> SessionView:
    values = _loads(text)
    try:
        messages = [_message(m) for m in values["messages"]]
        session = _record(Session, values["session"]) if values["session"] else None
        summary = _record(Summary, values["summary"]) if values.get("summary") else None
        return SessionView(session, messages, values["cursor"], summary)
    except (KeyError, TypeError) as exc:
        raise BadValue(f"not a cached first page: {type(exc).__name__}") from exc


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise BadValue("not JSON") from exc


def _message(values: Any) -> Message:
    if not isinstance(values, dict):
        raise BadValue("not a saved turn")
    values = dict(values)
    values["context"] = tuple(values.get("context") or ())
    values["kept"] = frozenset(values.get("kept") or ())
    for name in ("input_ref", "output_ref"):  # a long body's pointer (lib/storage/bodies.py), a dict in JSON
        values[name] = BodyRef.from_record(values[name]) if values.get(name) else None
    values["attachments"] = attachment_fields(values.get("attachments"))  # files' records (lib/storage/attachments.py)
    return _record(Message, values)


def _record(cls: type[T], values: Any) -> T:
    """`cls` from a dict, leaving out fields this release does not know; BadValue if one it needs is missing."""
    if not isinstance(values, dict):
        raise BadValue(f"not a {cls.__name__}")
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    try:
        return cls(**{k: v for k, v in values.items() if k in known})
    except TypeError as exc:  # a required field missing
        raise BadValue(f"an incomplete {cls.__name__}") from exc
