"""The hot tier's values as JSON: a saved turn, and a chat's first page (meta, summary, newest turns, cursor)."""
from __future__ import annotations

import dataclasses
import json
from typing import Any

from lib.storage.records import Message, Session, SessionView, Summary


def message_json(message: Message) -> str:
    return json.dumps(dataclasses.asdict(message))


def message_of(text: str) -> Message:
    values = json.loads(text)
    values["context"] = tuple(values.get("context") or ())
    return Message(**values)


def view_json(view: SessionView) -> str:
    return json.dumps({"session": dataclasses.asdict(view.session) if view.session else None,
                       "messages": [dataclasses.asdict(m) for m in view.messages], "cursor": view.cursor,
                       "summary": dataclasses.asdict(view.summary) if view.summary else None})


def view_of(text: str) -> SessionView:
    values: dict[str, Any] = json.loads(text)
    messages = []
    for m in values["messages"]:
        m["context"] = tuple(m.get("context") or ())
        messages.append(Message(**m))
    return SessionView(Session(**values["session"]) if values["session"] else None, messages, values["cursor"],
                       Summary(**values["summary"]) if values["summary"] else None)
