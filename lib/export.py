"""A whole session as Markdown or JSON, every turn included (not only the loaded page); and a question as typed.

The Markdown export fetches nothing when opened either: an image is written as '!' and a link, as the page shows it.

People paste tracebacks, logs and code into a question. As Markdown their line breaks would fold into one run-on
paragraph and their indentation vanish, so `typed_markdown` fences a pasted run of such lines (shown with its
whitespace) and keeps the rest's line breaks as hard breaks. The chat page shows a question through it and the
Markdown export writes it so; the model is always sent the question itself, never this rendering.
"""

from __future__ import annotations

import dataclasses
import json
import re

from lib.storage import keys
from lib.storage.records import FAILED, PENDING, Message, Session

# --- a question as typed ----------------------------------------------------------------------------------------

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_LIST_ITEM = re.compile(r"^ {0,3}(?:[-+*]|\d{1,9}[.)])(?:[ \t]|$)")
_LOG_LINE = re.compile(
    r"^\s*(?:\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d|\[?\d\d:\d\d:\d\d|\[?(?:TRACE|DEBUG|INFO|WARN|WARNING|ERROR|FATAL|"
    r"CRITICAL)\b)"
)
_CODE_LINE = re.compile(
    r"^\s*(?:Traceback \(most recent call last\)|File \".*\", line \d+|[\w.]+(?:Error|Exception|Warning)\b:?|"
    r"at [\w.$<>]+\(.*\)$|(?:async )?def \w+\(|class \w+[(:]|import [\w.]+|from [\w.]+ import |"
    r"(?:return|raise|yield)\b(?!.*[.?!]$)|(?:elif|if|for|while|with|except)\b.*:$|(?:else|try|finally):$|"
    r"(?:const|let|var)\s+\w+\s*=|function\s*\w*\(|(?:public|private|protected|static)\s+\w|#include\b|"
    r"(?:SELECT|INSERT|UPDATE|DELETE|CREATE|ALTER|DROP)\s|\$ |>>> |\.\.\. )"
)
_CODE_END = re.compile(
    r"[{};]\s*$|^\s*[})\]]+[;,]?\s*$|\)\s*:\s*$|=>|^\s*#!|^\s*[\w.\[\]'\"]+\s*[-+*/|&]?=\s*\S|^\s*[\w.]+\(.*\)\s*$"
)


def _code_like(line: str) -> bool:
    """A line that reads as code, a log or a traceback rather than prose."""
    if not line.strip():
        return False
    if line[0] in " \t" and not _LIST_ITEM.match(line.lstrip()) and not line.lstrip().startswith(">"):
        return True  # indented, and not a nested list item or a quote
    return bool(_LOG_LINE.match(line) or _CODE_LINE.match(line) or _CODE_END.search(line))


def _fenced(lines: list[str]) -> str:
    """Lines as a fenced code block that no line inside can close."""
    longest = max((len(run) for line in lines for run in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return "\n".join([fence, *lines, fence])


def _hard_breaks(lines: list[str]) -> str:
    """Prose lines with their line breaks kept (two trailing spaces: a Markdown hard break)."""
    return "  \n".join(line.rstrip() for line in lines)


def _paragraphs(text: str) -> list[tuple[str, list[str]]]:
    """("fence", lines) for the user's own fenced blocks (kept as written), ("text", lines) for each run of
    lines between blank lines."""
    out: list[tuple[str, list[str]]] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        opener = _FENCE.match(lines[i])
        if opener and not (opener.group(1)[0] == "`" and "`" in opener.group(2)):
            mark, j = opener.group(1), i + 1
            while j < len(lines):
                closer = _FENCE.match(lines[j])
                if closer and closer.group(1)[0] == mark[0] and len(closer.group(1)) >= len(mark):
                    if not closer.group(2).strip():
                        break
                j += 1
            out.append(("fence", lines[i : j + 1]))
            i = j + 1
        elif not lines[i].strip():
            out.append(("blank", []))
            i += 1
        else:
            if not out or out[-1][0] != "text":
                out.append(("text", []))
            out[-1][1].append(lines[i])
            i += 1
    return out


def _typed_paragraph(lines: list[str]) -> list[str]:
    """A paragraph as Markdown parts: prose, its code-like run fenced, prose."""
    marks = [_code_like(line) for line in lines]
    if sum(marks) >= 2:
        first, last = marks.index(True), len(marks) - 1 - marks[::-1].index(True)
        if sum(marks[first : last + 1]) >= 0.6 * (last + 1 - first):
            before, code, after = lines[:first], lines[first : last + 1], lines[last + 1 :]
            return [part for part in (_hard_breaks(before), _fenced(code), _hard_breaks(after)) if part.strip()]
    if _LIST_ITEM.match(lines[0]) or lines[0].lstrip().startswith("|"):
        return ["\n".join(lines)]  # a list or a table: its lines are Markdown's own
    return [_hard_breaks(lines)]


def typed_markdown(text: str) -> str:
    """A question as Markdown that shows it as typed: pasted code, logs and tracebacks fenced (whitespace kept;
    pasted paragraphs in a row are one block), the user's own fences as written, prose with its line breaks. A
    one-line question is returned unchanged."""
    if "\n" not in text.strip():
        return text
    parts: list[str] = []
    pasted: list[str] = []  # code-like paragraphs in a row, with the blank lines between them
    gap = 0
    in_list = False
    for kind, lines in _paragraphs(text):
        if kind == "blank":
            gap += 1
            continue
        if kind == "text" and in_list and lines[0][:1] in (" ", "\t"):
            parts.append("\n".join(lines))  # a list item's own indented paragraph
            gap = 0
            continue
        typed = _typed_paragraph(lines) if kind == "text" else None
        if typed is not None and len(typed) == 1 and typed[0].startswith("```"):
            if pasted:
                pasted += [""] * gap
            pasted += lines
            gap = 0
            continue
        if pasted:
            parts.append(_fenced(pasted))
            pasted = []
        parts.extend(typed if typed is not None else ["\n".join(lines)])
        in_list = kind == "text" and bool(_LIST_ITEM.match(lines[0]))
        gap = 0
    if pasted:
        parts.append(_fenced(pasted))
    return "\n\n".join(parts)


# --- the export -------------------------------------------------------------------------------------------------

WORD_JOINER = "\u2060"  # as lib/web/render.py: invisible, it keeps '![' from starting an image


def _inert(text: str) -> str:
    """Markdown whose images a viewer of the exported file will not fetch ('!' and a link, as on the page); the
    code blocks, which show an image's syntax as text anyway, are left exactly as written."""
    out = []
    for kind, lines in _paragraphs(text):
        block = "\n".join(lines)
        out.append(block if kind == "fence" else block.replace("![", "!" + WORD_JOINER + "["))
    return "\n".join(out)


def readable_time(text: str) -> str:
    """'Nov 6, 2026, 08:00 UTC' (the export's reader may be anywhere: times stay in UTC and say so)."""
    moment = keys.parse_time(text)
    return f"{moment:%b} {moment.day}, {moment.year}, {moment:%H:%M} UTC"


def _outcome(m: Message) -> str | None:
    """What happened to a turn that did not finish, in the app's own sentence (a Stop is a stop, not a failure)."""
    if m.status == FAILED:
        return m.error or "The answer did not finish."
    if m.status == PENDING:
        return "pending"
    return None


def to_markdown(session: Session, messages: list[Message]) -> str:
    count = f"{len(messages)} turn{'' if len(messages) == 1 else 's'}"
    lines = [f"# {session.title}", "", f"Started {readable_time(session.create_time)} · {count}", ""]
    for number, m in enumerate(messages, 1):
        lines += [f"## Turn {number} · {readable_time(m.create_time)}", "", "**You**", ""]
        lines += [_inert(typed_markdown(m.input_body)), ""]
        if m.attachments:  # names and sizes; export-user's zip holds the files themselves (docs/attachments.md)
            listed = ", ".join(f"{a.name} ({a.size:,} bytes)" for a in m.attachments)
            lines += [_inert(f"_Attached: {listed}_"), ""]
        lines += ["**Assistant**", ""]
        lines.append(_inert(m.output_body) if m.output_body else "_(no answer)_")
        outcome = _outcome(m)
        if outcome:
            lines += ["", f"_({outcome})_"]
        if m.output_truncated:
            lines += ["", "_(answer cut to fit the 400 KB storage limit)_"]
        lines.append("")
    return "\n".join(lines)


def to_json(session: Session, messages: list[Message]) -> str:
    def turn(m: Message) -> dict:
        data = dataclasses.asdict(m)
        data.pop("size")
        data["kept"] = sorted(m.kept)  # the versions that have a record (JSON has no sets)
        return data

    return json.dumps(
        {"session": dataclasses.asdict(session), "messages": [turn(m) for m in messages]}, ensure_ascii=False, indent=2
    )
