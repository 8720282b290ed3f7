"""Split Markdown into blocks that render alone, so a streamed answer renders each finished block once.

A block ends at a blank line outside a code fence (unless the next line continues a list or an
indented item), at a top-level fence that opens, and at the fence that closes it. The split is a
function of the text alone: scanning a growing text from the start of its open block gives the
same blocks as scanning the whole final text, which is why the streamed page and a reopened chat
are identical. Pure Python (no Streamlit), tested alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MARKDOWN, CODE, PLAIN = "markdown", "code", "plain"

# Limits on what reaches the browser's Markdown renderer (its parser recurses per nesting level and
# is quadratic in emphasis delimiters): a block past any of them is shown as plain text, saying why.
MAX_BLOCK_CHARS = 30_000
MAX_DEPTH = 16  # nested '>' and list markers on one line
MAX_INDENT = 64  # leading spaces: nested list items
MAX_EMPHASIS = 1_000  # '*' and '_' characters in one block

_FENCE = re.compile(r"^( *)(`{3,}|~{3,})([^\n]*)$")
_LIST_ITEM = re.compile(r"^ {0,3}(?:[-+*]|\d{1,9}[.)])(?:[ \t]|$)")
_CONTAINERS = re.compile(r"[ \t]*(?:>|[-+*](?=[ \t])|\d{1,9}[.)](?=[ \t]))")


@dataclass(frozen=True)
class Block:
    """One renderable piece: Markdown, a fenced code block (maybe still open), or text shown plain."""

    kind: str
    text: str  # MARKDOWN/PLAIN: the source; CODE: the code between the fences
    language: str | None = None
    reason: str | None = None  # PLAIN: why it is not formatted


def _fence_of(line: str) -> tuple[int, str, str] | None:
    """(indent, fence, info) if the line opens or could close a fence."""
    match = _FENCE.match(line)
    if match is None:
        return None
    indent, fence, info = len(match.group(1)), match.group(2), match.group(3)
    if fence[0] == "`" and "`" in info:
        return None  # not a fence: an inline code span
    return indent, fence, info


def _closes(line: str, opener: str) -> bool:
    fence = _fence_of(line)
    return (
        fence is not None
        and fence[0] <= 3
        and fence[1][0] == opener[0]
        and len(fence[1]) >= len(opener)
        and not fence[2].strip()
    )


class _Scan:
    """The split state between two block boundaries (it is empty at every boundary)."""

    def __init__(self) -> None:
        self.start: int | None = None  # where the current block starts
        self.fence: tuple[int, str, str] | None = None  # the top-level fence of a code block
        self.nested: str | None = None  # a fence inside a list item: never split inside it
        self.is_list = False
        self.blank_at: int | None = None  # a blank line after content: the block may end there


def scan(text: str, start: int = 0, *, final: bool = False) -> tuple[list[tuple[int, int]], int]:
    """Finished blocks of text[start:] as (begin, end) spans, and where the open block begins.

    Only whole lines decide a boundary; with `final` the text is complete and the rest is a block too.
    """
    spans: list[tuple[int, int]] = []
    s = _Scan()
    pos = start
    length = len(text)
    while pos < length:
        newline = text.find("\n", pos)
        if newline < 0:
            if not final:
                break
            newline = length
        line, line_end = text[pos:newline], newline + 1
        if s.fence is not None:  # inside a top-level code block
            if _closes(line, s.fence[1]):
                spans.append((s.start, min(line_end, length)))
                s = _Scan()
            pos = line_end
            continue
        if s.nested is not None:
            if _closes(line.lstrip(" "), s.nested):
                s.nested = None
            pos = line_end
            continue
        if not line.strip():
            if s.start is not None and s.blank_at is None:
                s.blank_at = pos
            pos = line_end
            continue
        if s.blank_at is not None:
            continues = line[0] in " \t" or (s.is_list and _LIST_ITEM.match(line) is not None)
            if not continues:
                spans.append((s.start, s.blank_at))
                s = _Scan()
            else:
                s.blank_at = None
        fence = _fence_of(line)
        if fence is not None and s.is_list and fence[0] >= 2:
            s.nested = fence[1]
        elif fence is not None and fence[0] <= 3:
            if s.start is not None:  # a fence interrupts a paragraph
                spans.append((s.start, pos))
            s = _Scan()
            s.start, s.fence = pos, fence
        elif s.start is None:
            s.start, s.is_list = pos, _LIST_ITEM.match(line) is not None
        pos = line_end
    if final and s.start is not None:
        spans.append((s.start, s.blank_at if s.blank_at is not None else length))
        return spans, length
    return spans, (s.start if s.start is not None else pos)


def block_of(source: str) -> Block:
    """What one span of source renders as: code for a fence (closed or still open), else bounded Markdown."""
    source = source.rstrip("\n")
    fence = _fence_of(source.split("\n", 1)[0])
    if fence is not None and fence[0] <= 3:
        indent, opener, info = fence
        lines = source.split("\n")[1:]
        if lines and _closes(lines[-1], opener):
            lines = lines[:-1]
        body = "\n".join(line[min(indent, len(line) - len(line.lstrip(" "))) :] for line in lines)
        return Block(CODE, body, language=(info.strip().split() or [None])[0])
    reason = too_complex(source)
    if reason:
        return Block(PLAIN, source, reason=reason)
    return Block(MARKDOWN, source)


def too_complex(source: str) -> str | None:
    """Why a block must not reach the Markdown renderer, or None."""
    if len(source) > MAX_BLOCK_CHARS:
        return f"this part is longer than {MAX_BLOCK_CHARS:,} characters"
    if source.count("*") + source.count("_") > MAX_EMPHASIS:
        return f"this part has more than {MAX_EMPHASIS:,} emphasis marks (* or _)"
    for line in source.split("\n"):
        indent = len(line) - len(line.lstrip(" \t"))
        if indent > MAX_INDENT:
            return f"this part is indented more than {MAX_INDENT} spaces"
        if _depth(line) > MAX_DEPTH:
            return f"this part nests more than {MAX_DEPTH} levels deep"
    return None


def _depth(line: str) -> int:
    """Quote and list markers before the line's text."""
    depth, pos = 0, 0
    while True:
        match = _CONTAINERS.match(line, pos)
        if match is None or match.end() == pos:
            return depth
        depth, pos = depth + 1, match.end()
        if depth > MAX_DEPTH:
            return depth


def split(text: str) -> list[Block]:
    """Every block of a complete text, in order."""
    spans, _ = scan(text, final=True)
    return [block_of(text[a:b]) for a, b in spans if text[a:b].strip()]


_MARK_RUN = re.compile(r"`+|\*+|_+")
_PUNCTUATION = set("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def close_emphasis(source: str) -> str:
    """A Markdown paragraph cut short (an answer still streaming, or stopped) with its open emphasis closed, so
    '_the first turn of our' shows as italics, not as a stray '_' (CommonMark's flanking rules, simplified; code
    spans left alone). A mark the cut left at the very end, with nothing after it yet, is dropped."""
    text = re.sub(r"(^|\s)[*_]+$", r"\1", source.rstrip()).rstrip()
    stack: list[str] = []
    in_code: str | None = None
    for match in _MARK_RUN.finditer(text):
        run = match.group()
        if run[0] == "`":  # a code span opens or closes with a run of the same length
            in_code = None if in_code == run else (in_code or run)
            continue
        if in_code:
            continue
        before = text[match.start() - 1] if match.start() else " "
        after = text[match.end()] if match.end() < len(text) else " "
        left = not after.isspace() and (after not in _PUNCTUATION or before.isspace() or before in _PUNCTUATION)
        right = not before.isspace() and (before not in _PUNCTUATION or after.isspace() or after in _PUNCTUATION)
        if run[0] == "_":  # an underscore inside a word (snake_case) neither opens nor closes
            opens, closes = (
                left and (not right or before in _PUNCTUATION),
                right and (not left or after in _PUNCTUATION),
            )
        else:
            opens, closes = left, right
        if closes and stack and stack[-1][0] == run[0]:
            stack.pop()
        elif opens:
            stack.append(run)
    if not stack and text == source.rstrip():
        return source  # nothing open, nothing dropped: as written
    return text + "".join(reversed(stack))
