"""Text that reaches a Markdown renderer: nothing a user or a model wrote may make the browser fetch anything.

Streamlit escapes HTML already (we never pass unsafe_allow_html), so the one construct left that fetches is
an image, and every image starts with the two characters '![' (inline, nested brackets, reference style
alike). A WORD JOINER between them (invisible, zero width) leaves '!' and a link, in code spans too: a
click on a link is the user's choice, a fetch on display would leak the chat to whoever owns the URL.
"""

from __future__ import annotations

import re

WORD_JOINER = "\u2060"


def safe_markdown(text: str) -> str:
    """Markdown that renders as written, minus images (shown as '!' and a link, never fetched)."""
    return text.replace("![", "!" + WORD_JOINER + "[")


_MARKDOWN_SPECIALS = re.compile(r"([\\`*_{}\[\]()#+\-.!|~<>:$])")


def plain_label(text: str) -> str:
    """Text shown literally where Streamlit renders Markdown (labels, titles): every special character escaped."""
    return _MARKDOWN_SPECIALS.sub(r"\\\1", text)


_QUOTED = re.compile("\u201c([^\u201d]*)\u201d")


def names_plain(text: str) -> str:
    """An app's message shown where Streamlit renders Markdown, with whatever it quotes between curly quotes (a file
    name, a title: the user's text) escaped so it reads literally and never renders an image or a link; the app's
    own sentence around it keeps its Markdown. A file name holds no curly quote (lib.turn.attachments.sanitized_name),
    so it cannot end its quote early."""
    return _QUOTED.sub(lambda m: "\u201c" + plain_label(m.group(1)) + "\u201d", text)
