"""A whole session as Markdown or JSON, every turn included (not only the loaded page)."""

from __future__ import annotations

import dataclasses
import json

from lib.storage.records import DONE, Message, Session


def to_markdown(session: Session, messages: list[Message]) -> str:
    lines = [f"# {session.title}", "", f"Started {session.create_time} · {len(messages)} turns", ""]
    for number, m in enumerate(messages, 1):
        lines += [f"## Turn {number} · {m.create_time}", "", "**You**", "", m.input_body, "", "**Assistant**", ""]
        lines.append(m.output_body or "_(no answer)_")
        if m.status != DONE:
            lines += ["", f"_({m.status}{': ' + m.error if m.error else ''})_"]
        if m.output_truncated:
            lines += ["", "_(answer cut to fit the 400 KB storage limit)_"]
        lines.append("")
    return "\n".join(lines)


def to_json(session: Session, messages: list[Message]) -> str:
    def turn(m: Message) -> dict:
        data = dataclasses.asdict(m)
        data.pop("size")
        return data

    return json.dumps(
        {"session": dataclasses.asdict(session), "messages": [turn(m) for m in messages]}, ensure_ascii=False, indent=2
    )
