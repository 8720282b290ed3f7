"""The stored form of "What the model saw": one short string on the turn item, bounded whatever the chat's length.

A turn item records which parts of the prompt its answer was made from (ids and token counts, never text).
One map per part made the record grow with the chat: a 2,000-token budget of short turns holds ~165 of
them, and at turn 300 the record was 90% of the item, paid by every finish and read back by every open.
Stored now as one string attribute, with two rules that bound it:
- the newest turns sent word for word are always one run of consecutive answered turns, so they are one
  part: `turns <tokens> <count> <first id> <last id>`;
- of memories and recalled turns at most MAX_LISTED each are listed by id; the rest are one part that
  counts them (`memory <tokens> +<count>`).
So a record has at most 2 * MAX_LISTED + 5 parts; MAX_BYTES is its worst size (tests/test_seen.py builds
the worst case). Part syntax: `<kind> <tokens>[~] [<id> | +<count> | <count> <first> <last>]`, parts joined
by `|`; `~` marks a part cut to fit. Items written before this form keep their list of maps; both decode
to the same dicts (`kind`, `tokens`, and `id`, `excerpt`, `count`, `first`, `last` where they apply).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

KINDS = (
    "system", "instructions", "project", "memory", "summary", "recalled", "turn", "turns", "question", "attachment"
)  # fmt: skip
LISTED = ("memory", "recalled")  # kinds listed by id up to MAX_LISTED, the rest counted in one part
MAX_LISTED = 16
# 2 * 16 listed parts of "recalled 999999~ <26-char id>" (42 bytes), their two "+count" parts, the run of turns,
# system, instructions, summary and question, and the separators: tests/test_seen.py builds it and checks the figure.
# (Each file attached to the question adds one part of at most 46 bytes, `attachment 999999~ <26-char id>`: 230 with
# the default CHAT_MAX_ATTACHMENTS of 5, docs/attachments.md.)
# (A project's instructions add one part of at most 42 bytes, `project 999999 <26-char id>`: tests/test_projects.py.)
MAX_BYTES = 1_600
UNREADABLE = "unreadable"
_FIELDS = ("kind", "tokens", "id", "excerpt", "count", "first", "last")

_ID = re.compile(r"^[0-9A-Za-z_.-]{1,64}$")


def compact(parts: Iterable[Mapping[str, Any]]) -> list[dict]:
    """The parts in the bounded form: consecutive `turn` parts as one `turns` run, and listed kinds beyond
    MAX_LISTED counted in one part per kind (placed after the kind's last listed part)."""
    out: list[dict] = []
    listed: dict[str, int] = {}
    rest: dict[str, dict] = {}
    for part in parts:
        kind, tokens = part["kind"], int(part.get("tokens", 0))
        if kind == "turn":
            last = out[-1] if out else None
            if last is not None and last["kind"] == "turns":
                last.update(tokens=last["tokens"] + tokens, count=last["count"] + 1, last=part.get("id", ""))
                if part.get("excerpt"):  # a long message in the run was sent as its beginning
                    last["excerpt"] = True
            else:
                out.append(
                    {
                        "kind": "turns",
                        "tokens": tokens,
                        "count": 1,
                        "first": part.get("id", ""),
                        "last": part.get("id", ""),
                    }
                    | ({"excerpt": True} if part.get("excerpt") else {})
                )
            continue
        if kind in LISTED:
            counted = int(part.get("count", 0))  # a part that already counts several (compacting twice)
            listed[kind] = listed.get(kind, 0) + (0 if counted else 1)
            if counted or listed[kind] > MAX_LISTED:
                more = rest.get(kind)
                if more is None:
                    more = rest[kind] = {"kind": kind, "tokens": 0, "count": 0}
                    out.append(more)
                more["tokens"] += tokens
                more["count"] += counted or 1
                continue
        out.append({k: v for k, v in part.items() if k in _FIELDS} | {"tokens": tokens})
    return out


def encode(parts: Sequence[Mapping[str, Any]]) -> str:
    """The record as stored (parts already compacted); ValueError for a part it cannot write back exactly."""
    fields = []
    for part in parts:
        kind = part["kind"]
        if kind not in KINDS:
            raise ValueError(f"unknown part kind {kind!r}")
        head = f"{kind} {int(part['tokens'])}{'~' if part.get('excerpt') else ''}"
        if kind == "turns":
            ids = (part["first"], part["last"])
            head += f" {int(part['count'])} {_checked(ids[0])} {_checked(ids[1])}"
        elif "count" in part:
            head += f" +{int(part['count'])}"
        elif part.get("id") is not None:
            head += f" {_checked(str(part['id']))}"
        fields.append(head)
    return "|".join(fields)


def _checked(ident: str) -> str:
    if not _ID.match(ident):
        raise ValueError(f"an id of a context part must be 1-64 letters, digits, '_', '.' or '-': {ident!r}")
    return ident


def decode(value: Any) -> tuple[dict, ...]:
    """The parts of a stored record: the string form, or the list of maps of older items. A value that is
    neither, or a string that does not parse, is one `unreadable` part: reported on the page, never dropped
    silently as if the model had seen nothing."""
    if value is None or value == "":
        return ()
    if isinstance(value, (list, tuple)):
        try:
            return tuple({k: int(v) if isinstance(v, Decimal) else v for k, v in dict(p).items()} for p in value)
        except (TypeError, ValueError):
            return ({"kind": UNREADABLE, "tokens": 0},)
    if not isinstance(value, str):
        return ({"kind": UNREADABLE, "tokens": 0},)
    try:
        return tuple(_part(text) for text in value.split("|"))
    except (ValueError, IndexError):
        return ({"kind": UNREADABLE, "tokens": 0},)


def _part(text: str) -> dict:
    fields = text.split(" ")
    kind, tokens = fields[0], fields[1]
    if kind not in KINDS:
        raise ValueError(kind)
    part: dict[str, Any] = {"kind": kind, "tokens": int(tokens.rstrip("~"))}
    if tokens.endswith("~"):
        part["excerpt"] = True
    rest = fields[2:]
    if kind == "turns":
        count, first, last = rest
        part.update(count=int(count), first=_checked(first), last=_checked(last))
    elif rest and rest[0].startswith("+"):
        (count,) = rest
        part["count"] = int(count[1:])
    elif rest:
        (ident,) = rest
        part["id"] = _checked(ident)
    if part["tokens"] < 0 or part.get("count", 1) < 1:
        raise ValueError(text)
    return part
